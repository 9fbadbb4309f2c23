"""Write src/infertune/data/reranking_heldout.jsonl: queries with graded passages for rerankers.

Every query and passage below was written for this project; nothing is downloaded or copied.
Each query has three passages of its own, graded by hand: 3 answers the query, 2 answers part
of it, 1 is on the topic without answering it. Two passages written for other queries are
added to each query as grade 0, picked by ``random.Random(SEED)``, so the file is the same on
every run. Rows are shuffled within each query (a reranker must not find the answer by
position) and queries keep their order.

    python scripts/make_reranking.py           # rewrites the file
    python scripts/make_reranking.py --stats   # same, and prints the counts as JSON
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 20261203
NEGATIVES = 2
OUT = Path(__file__).resolve().parents[1] / "src" / "infertune" / "data" / "reranking_heldout.jsonl"

# query -> (answers it, answers part of it, on the topic only)
TOPICS: list[tuple[str, str, str, str]] = [
    ("how do I reset my password",
     "To reset your password, open Settings, choose Security, press Reset password and follow "
     "the link we email you; the link expires after one hour.",
     "Password resets are sent by email, so check that your account's email address is current.",
     "Strong passwords are long and mix words, numbers and symbols."),
    ("what is the capital of france",
     "Paris is the capital of France and its largest city, on the Seine in the north of the "
     "country.",
     "The French government sits in a city on the Seine that is also home to the Louvre.",
     "France is divided into thirteen metropolitan regions and several overseas territories."),
    ("how long does shipping take",
     "Standard shipping takes three to five business days; express orders arrive the next "
     "business day if placed before 2 pm.",
     "Express orders placed before 2 pm are delivered the next business day.",
     "We ship to more than forty countries from two warehouses."),
    ("can I return an item after 30 days",
     "Items can be returned within 30 days of delivery; after that we offer store credit only, "
     "up to 60 days.",
     "Returns are free for items in their original packaging.",
     "Our returns team answers most questions within a day."),
    ("symptoms of type 2 diabetes",
     "Common symptoms of type 2 diabetes are increased thirst, frequent urination, tiredness, "
     "blurred vision and cuts that heal slowly.",
     "Many people with type 2 diabetes feel unusually thirsty and tired.",
     "Type 2 diabetes is treated with diet, exercise and often metformin."),
    ("how to boil an egg",
     "Lower the egg into boiling water, cook it for seven minutes for a firm yolk, then cool it "
     "in cold water before peeling.",
     "Cooling a boiled egg in cold water makes it easier to peel.",
     "Eggs keep for several weeks in the refrigerator."),
    ("what causes inflation",
     "Inflation rises when demand grows faster than supply, when production costs such as "
     "energy go up, or when the money supply expands quickly.",
     "Higher energy prices push up the cost of making and moving goods, and so prices.",
     "Central banks publish inflation figures every month."),
    ("how does photosynthesis work",
     "In photosynthesis, plants use light energy captured by chlorophyll to turn carbon dioxide "
     "and water into glucose, releasing oxygen.",
     "Chlorophyll in the leaves absorbs the light a plant needs.",
     "Plants grow towards light, a response called phototropism."),
    ("best time to visit japan",
     "Spring, from late March to May, and autumn, from October to November, are the best times "
     "to visit Japan: mild weather and cherry blossoms or red maples.",
     "Cherry blossoms in Japan usually bloom in late March and early April.",
     "Japan's rail pass covers most long-distance trains."),
    ("do I need a visa for canada",
     "Most visitors need either a visitor visa or an electronic travel authorization to fly to "
     "Canada; citizens of the United States need neither.",
     "Visitors from visa-exempt countries need an electronic travel authorization to fly in.",
     "Canada is the second-largest country in the world by area."),
    ("how to fix a python import error",
     "An ImportError usually means the package is not installed in the interpreter you are "
     "running: install it with that interpreter's pip, or activate the right virtual "
     "environment.",
     "Check which interpreter runs your script with python -c 'import sys; print(sys.executable)'.",
     "Python packages are published on the Python Package Index."),
    ("what is a confidence interval",
     "A 95% confidence interval is a range computed from the data by a method that contains the "
     "true value in 95% of repeated samples.",
     "Wider confidence intervals come from smaller or noisier samples.",
     "Statistics courses often start with means and medians."),
    ("how to lower blood pressure",
     "Blood pressure falls with less salt, regular exercise, less alcohol, a healthy weight and, "
     "when needed, medicines prescribed by a doctor.",
     "Eating less salt lowers blood pressure for many people.",
     "Blood pressure is measured in millimetres of mercury."),
    ("who won the football match yesterday",
     "The home side won yesterday's match two goals to one, with the winner scored in the last "
     "minute.",
     "Yesterday's match was decided by a goal in the final minute.",
     "The league season runs from August to May."),
    ("how to cancel my subscription",
     "To cancel, open Account, choose Subscription and press Cancel; you keep access until the "
     "end of the period you paid for.",
     "After you cancel, access continues until the paid period ends.",
     "Subscriptions renew automatically each month."),
    ("what is the speed of light",
     "Light travels through a vacuum at 299,792,458 metres per second, about 300,000 kilometres "
     "each second.",
     "Light is far faster than sound, which covers about 343 metres per second in air.",
     "Einstein's theory of relativity treats the speed of light as a universal limit."),
    ("how to make bread rise",
     "Bread rises when yeast ferments sugars and releases gas: use fresh yeast, warm water and "
     "leave the dough in a warm place for an hour or two.",
     "Dough rises faster in a warm kitchen than in a cold one.",
     "Sourdough bread has been baked for thousands of years."),
    ("what is a tort in law",
     "A tort is a civil wrong, such as negligence or defamation, that causes harm and lets the "
     "injured person claim damages in court.",
     "Negligence is the most common kind of tort claim.",
     "Law students study contracts, property and criminal law in their first year."),
    ("how much does the premium plan cost",
     "The premium plan costs 12 dollars a month or 120 dollars a year, taxes not included.",
     "Paying yearly for premium saves two months compared with paying monthly.",
     "Premium members get priority support."),
    ("why is the sky blue",
     "The sky looks blue because air scatters short blue wavelengths of sunlight much more than "
     "longer red ones, an effect called Rayleigh scattering.",
     "Sunsets look red because blue light is scattered away over the long path through the air.",
     "The atmosphere is mostly nitrogen and oxygen."),
    ("how to speed up model inference",
     "Inference gets faster with a runtime built for the hardware, quantization to INT8 or "
     "lower precision, batching requests and trimming inputs to the lengths you need.",
     "Batching several requests together raises throughput on most hardware.",
     "Machine learning models are trained on large datasets."),
    ("how to treat a sprained ankle",
     "Rest the ankle, cool it with ice for twenty minutes at a time, wrap it with a compression "
     "bandage and keep it raised for the first two days.",
     "Ice on a sprain for twenty minutes at a time reduces swelling.",
     "Ankle sprains are common in basketball and football."),
    ("where is my order",
     "You can track your order under Orders in your account; the tracking number appears once "
     "the parcel leaves our warehouse.",
     "A tracking number is emailed when your parcel ships.",
     "Orders over 50 dollars ship for free."),
    ("what is compound interest",
     "Compound interest is interest earned on both the original deposit and the interest "
     "already added, so savings grow faster over time.",
     "With compounding, the interest from earlier years earns interest itself.",
     "Banks publish their savings rates on their websites."),
    ("how to learn a new language fast",
     "Learn a language quickly by practising every day, speaking with native speakers early and "
     "learning the most common words first.",
     "Speaking with native speakers from the start speeds up learning.",
     "Spanish is spoken by more than 500 million people."),
    ("what is the tallest mountain",
     "Mount Everest, on the border of Nepal and China, is the tallest mountain above sea level at "
     "8,849 metres.",
     "The tallest peaks in the world are in the Himalayas.",
     "Mountaineers need weeks to acclimatise to high altitude."),
    ("how to write a cover letter",
     "A good cover letter names the job, shows in a few paragraphs how your experience fits its "
     "needs, and ends by asking for an interview.",
     "Tailor each cover letter to the job you apply for.",
     "Many employers now accept applications online."),
    ("why does my laptop overheat",
     "Laptops overheat when dust blocks the fans and vents, when they sit on soft surfaces that "
     "cover the vents, or when a program keeps the processor busy.",
     "Cleaning dust from the vents often fixes overheating.",
     "Laptop batteries wear out after a few hundred charge cycles."),
    ("how many planets are in the solar system",
     "The solar system has eight planets: Mercury, Venus, Earth, Mars, Jupiter, Saturn, Uranus "
     "and Neptune.",
     "Pluto was reclassified as a dwarf planet in 2006.",
     "The Sun holds more than 99% of the solar system's mass."),
    ("how to change a flat tire",
     "Loosen the wheel nuts, jack up the car, remove the flat, fit the spare, tighten the nuts "
     "by hand, lower the car and then tighten them fully.",
     "Loosen the wheel nuts before you lift the car off the ground.",
     "Tires should be replaced when the tread is worn below 1.6 millimetres."),
]


def rows() -> list[dict[str, object]]:
    rng = random.Random(SEED)
    out: list[dict[str, object]] = []
    for index, (query, answer, partial, topical) in enumerate(TOPICS):
        group = f"q{index:03d}"
        others = [i for i in range(len(TOPICS)) if i != index]
        negatives = [TOPICS[i][1 + rng.randrange(3)] for i in rng.sample(others, NEGATIVES)]
        graded = [(answer, 3), (partial, 2), (topical, 1)] + [(p, 0) for p in negatives]
        rng.shuffle(graded)
        out.extend({"query": query, "passage": passage, "label": label, "group": group}
                   for passage, label in graded)
    return out


def stats(made: list[dict[str, object]]) -> dict[str, object]:
    labels = [int(str(r["label"])) for r in made]
    words = sorted(len(str(r["query"]).split()) + len(str(r["passage"]).split()) for r in made)
    return {"rows": len(made), "queries": len({r["group"] for r in made}),
            "rows_per_query": len(made) // len(TOPICS),
            "by_label": {str(k): labels.count(k) for k in (3, 2, 1, 0)},
            "words_per_pair_min_median_max": [words[0], words[len(words) // 2], words[-1]]}


def main() -> None:
    made = rows()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in made),
                   encoding="utf-8")
    if "--stats" in sys.argv:
        print(json.dumps(stats(made), indent=2))


if __name__ == "__main__":
    main()
