#!/usr/bin/env python3
# ruff: noqa: E501  (this file is mostly hand-written prose kept one sentence per line)
"""Generate the bundled held-out sentence set for the all-MiniLM-L6-v2 model.

Every sentence below was written for this project: the script composes rows from
hand-written templates, small vocabularies and hand-written passages. Nothing is
downloaded or copied from an existing dataset. The output is deterministic
(random.Random(20261130)) and is written to

    src/infertune/data/minilm_heldout.jsonl

one JSON object per line: {"input": "<text>", "group": "<id>"}. Rows that are
near-duplicates (paraphrase, typo, casing/punctuation change, word-order swap)
or exact duplicates of each other share a group id; every other row has a group
of its own.

Usage: python scripts/make_heldout.py [--out PATH] [--stats]
Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
from pathlib import Path

SEED = 20261130
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "src" / "infertune" / "data" / "minilm_heldout.jsonl"

N_SHORT = 190
N_MEDIUM = 240
N_TRANSFORM_PAIRS = 48
MAX_PER_SHORT_TEMPLATE = 3
MAX_PER_MEDIUM_TEMPLATE = 2
# a generated row is rejected if its word-set Jaccard similarity with any row
# already generated reaches this value (keeps unrelated groups apart)
MAX_JACCARD = 0.75
N_EXACT_DUP_SOURCES = 8

# ---------------------------------------------------------------------------
# Vocabularies
# ---------------------------------------------------------------------------

DEVICES = [
    "laptop",
    "phone",
    "router",
    "printer",
    "tablet",
    "smartwatch",
    "headphones",
    "monitor",
    "keyboard",
    "smart TV",
    "game console",
    "external drive",
    "webcam",
    "mesh wifi",
    "e-reader",
]
PROBLEMS = [
    "not charging",
    "won't turn on",
    "keeps disconnecting",
    "overheating",
    "screen flickering",
    "no sound",
    "running slow",
    "stuck on boot",
    "battery draining fast",
    "bluetooth not pairing",
    "not detected",
    "fan very loud",
]
PROBLEMS_ING = [
    "disconnecting from the wifi",
    "freezing on the lock screen",
    "shutting down at random",
    "losing its bluetooth connection",
    "dimming the screen on its own",
    "draining the battery overnight",
    "rebooting during video calls",
    "dropping keystrokes",
    "forgetting my settings",
]
PRODUCTS = [
    "running shoes",
    "winter jacket",
    "espresso machine",
    "office chair",
    "air fryer",
    "yoga mat",
    "hiking backpack",
    "standing desk",
    "wireless earbuds",
    "blender",
    "carry-on suitcase",
    "rain boots",
    "cast iron pan",
    "desk lamp",
    "robot vacuum",
    "electric kettle",
    "duvet cover",
    "bike helmet",
]
PRICES = ["under $50", "under $100", "under 200 dollars", "on sale", "for beginners", "2026"]
CITIES = [
    "Lisbon",
    "Kyoto",
    "Toronto",
    "Nairobi",
    "Reykjavik",
    "Buenos Aires",
    "Prague",
    "Seoul",
    "Vancouver",
    "Marrakech",
    "Edinburgh",
    "Hanoi",
    "Cape Town",
    "Melbourne",
    "Oslo",
    "Mexico City",
    "Istanbul",
    "Porto",
]
COUNTRIES = [
    "Japan",
    "Canada",
    "Brazil",
    "Kenya",
    "Norway",
    "Vietnam",
    "Morocco",
    "Australia",
    "Portugal",
    "Chile",
    "New Zealand",
    "Iceland",
    "Turkey",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
DISHES = [
    "banana bread",
    "chicken curry",
    "sourdough bread",
    "lentil soup",
    "pad thai",
    "mushroom risotto",
    "beef stew",
    "focaccia",
    "shakshuka",
    "potato gratin",
    "ramen broth",
    "apple pie",
    "guacamole",
    "basil pesto",
    "chili con carne",
    "roast chicken",
    "carrot cake",
    "vegetable lasagna",
]
BAKED = [
    "banana bread",
    "sourdough bread",
    "focaccia",
    "apple pie",
    "carrot cake",
    "vegetable lasagna",
    "potato gratin",
    "roast chicken",
    "cornbread",
    "granola",
]
CRISPY = [
    "roast potatoes",
    "chicken thighs",
    "focaccia",
    "roasted chickpeas",
    "potato gratin",
    "fish fillets",
    "tofu",
]
SUB_PAIRS = [
    "Greek yogurt for sour cream",
    "olive oil for butter",
    "honey for maple syrup",
    "oat milk for whole milk",
    "baking soda for baking powder",
    "brown sugar for white sugar",
    "dried thyme for fresh thyme",
    "cornstarch for flour",
]
DRUGS = [
    "ibuprofen",
    "amoxicillin",
    "metformin",
    "lisinopril",
    "cetirizine",
    "omeprazole",
    "sertraline",
    "prednisone",
    "acetaminophen",
    "atorvastatin",
    "loratadine",
    "levothyroxine",
]
SUPPLEMENTS = [
    "vitamin D",
    "magnesium",
    "fish oil",
    "iron tablets",
    "melatonin",
    "St. John's wort",
    "grapefruit juice",
]
SYMPTOMS = [
    "headache",
    "lower back pain",
    "dry cough",
    "dizziness",
    "chest tightness",
    "knee swelling",
    "insomnia",
    "heartburn",
    "sore throat",
    "fatigue",
    "itchy rash",
    "ringing in the ears",
    "numb fingers",
]
LANGUAGES = [
    "python",
    "javascript",
    "rust",
    "golang",
    "java",
    "sql",
    "bash",
    "typescript",
    "c++",
    "kotlin",
]
CODE_TASKS = [
    "reverse a list",
    "read a csv file",
    "parse json",
    "sort a dict by value",
    "merge two arrays",
    "remove duplicates",
    "split a string",
    "format dates",
    "make an http request",
    "write unit tests",
    "handle timeouts",
    "read environment variables",
    "flatten a nested list",
    "retry failed requests",
]
PY_ERRORS = [
    "KeyError",
    "IndexError",
    "ModuleNotFoundError",
    "TypeError",
    "RecursionError",
    "UnicodeDecodeError",
    "AttributeError",
    "ValueError",
]
FIN_TERMS = [
    "roth ira",
    "index fund",
    "credit score",
    "mortgage refinance",
    "capital gains tax",
    "emergency fund",
    "student loan consolidation",
    "high yield savings account",
    "dividend reinvestment",
    "401k rollover",
    "bond ladder",
    "expense ratio",
]
LEGAL_TERMS = [
    "tenant rights",
    "small claims court",
    "non compete clause",
    "power of attorney",
    "living will",
    "fair use",
    "security deposit",
    "wrongful termination",
    "prenuptial agreement",
    "trademark registration",
    "jury duty",
    "probate",
]
SPORTS_Q = [
    "offside rule explained",
    "marathon training plan",
    "tennis serve technique",
    "how long is a rugby match",
    "best stretches for runners",
    "world cup qualifiers schedule",
    "basketball zone defense",
    "swimming drills for beginners",
    "cycling cadence tips",
    "how to wax cross country skis",
    "chess opening for beginners",
    "golf handicap calculation",
]
SCIENCE_Q = [
    "why is the sky blue",
    "how do vaccines work",
    "photosynthesis equation",
    "carbon 14 half life",
    "speed of light in water",
    "what is dark matter",
    "how tides work",
    "plate tectonics simple explanation",
    "CRISPR explained",
    "why do leaves change color",
    "black hole event horizon",
    "boiling point at altitude",
]
HANDWRITTEN_SHORT = [
    "refund status",
    "cancel my subscription",
    "forgot wifi password",
    "lost luggage claim",
    "jet lag remedies",
    "is coffee dehydrating",
    "convert cups to grams",
    "train strike tomorrow",
    "weather this weekend",
    "nearest pharmacy open now",
    "change delivery address",
    "gift card balance",
    "how to unclog a drain",
    "what time is sunset",
    "package marked delivered but missing",
    "how many calories in an avocado",
    "does insurance cover physiotherapy",
    "git undo last commit",
    "docker container keeps restarting",
    "kubernetes pod pending",
    "sql join vs subquery",
    "regex match email address",
    "numpy broadcasting error",
    "npm install permission denied",
    "ssh connection refused",
    "pip install behind proxy",
    "apartment lease early termination",
    "how to dispute a charge",
    "currency exchange rate today",
    "passport renewal processing time",
    "electric car charging cost",
    "solar panels worth it",
    "best time to visit Patagonia",
    "how to fold a fitted sheet",
    "dog ate chocolate what to do",
    "baby fever 38.5",
    "vegan protein sources",
    "How To Remove Rust From Tools",
    "Cheap hotels near the airport",
    "overnight oats ratio",
    "how to cite a website apa",
    "tax deadline extension",
    "noise complaint neighbors",
    "uber vs taxi from airport",
    "kids museum rainy day",
    "migraine with aura",
    "vitamin b12 deficiency symptoms",
    "iphone storage full",
    "print double sided mac",
    "excel vlookup not working",
    "zoom audio echo",
    "outlook calendar not syncing",
    "rust borrow checker error",
    "javascript async await loop",
    "css center a div",
    "postgres slow query",
    "react useEffect runs twice",
    "what is a hash map",
    "bitcoin price history",
    "how to build credit from scratch",
    "car insurance after accident",
    "is my landlord allowed to raise rent",
    "how to file a small claim",
    "world's tallest mountain",
    "how far is the moon",
    "why do cats purr",
    "Champions League final tickets",
    "NBA playoff bracket",
    "yoga for lower back",
    "substitute for buttermilk",
    "how to sharpen kitchen knives",
    "sourdough hydration percentage",
    "cheapest day to fly",
    "eSIM for international travel",
    "train from Paris to Amsterdam",
    "order never arrived",
    "promo code not working",
    "Where Is My Refund",
    "warranty claim headphones",
    "size exchange shoes",
]

SHORT_TEMPLATES = [
    "{device} {problem}",
    "{device} {problem} fix",
    "reset {device} to factory settings",
    "update firmware on {device}",
    "best {product} {price}",
    "{product} size guide",
    "track my {product} order",
    "return {product} without receipt",
    "{product} reviews",
    "cheap flights to {city}",
    "things to do in {city}",
    "{city} weather in {month}",
    "visa requirements for {country}",
    "is {country} safe for solo travel",
    "{city} airport to city center",
    "{dish} recipe",
    "easy {dish} recipe",
    "how long to bake {baked}",
    "can you freeze {dish}",
    "{drug} side effects",
    "{drug} and alcohol",
    "{drug} dosage for adults",
    "can i take {drug} with {supplement}",
    "{symptom} causes",
    "{symptom} when to see a doctor",
    "{symptom} home remedies",
    "{language} {code_task}",
    "how to {code_task} in {language}",
    "python {pyerror} fix",
    "{pyerror} when importing module",
    "what is a {fin}",
    "{fin} explained",
    "is a {fin} worth it",
    "{legal} explained",
    "how does {legal} work",
    "{legal} lawyer near me",
    "{product} vs cheaper alternative",
    "{city} food tour",
    "{baked} without an oven",
    "{symptom} and {symptom2}",
    "{language} interview questions",
    "{sportq}",
    "{sciq}",
]

# ---------------------------------------------------------------------------
# Medium sentences: templates with slots (several per topic) + hand-written
# ---------------------------------------------------------------------------

MEDIUM_FILL = {
    "device": DEVICES,
    "problem_ing": PROBLEMS_ING,
    "product": PRODUCTS,
    "city": CITIES,
    "city2": CITIES,
    "country": COUNTRIES,
    "month": MONTHS,
    "weekday": WEEKDAYS,
    "dish": DISHES,
    "baked": BAKED,
    "crispy": CRISPY,
    "sub": SUB_PAIRS,
    "drug": DRUGS,
    "supplement": SUPPLEMENTS,
    "symptom": SYMPTOMS,
    "language": ["Python", "JavaScript", "Rust", "Go", "Java", "TypeScript", "Kotlin", "C#"],
    "code_task": CODE_TASKS,
    "pyerror": PY_ERRORS,
    "duration": [
        "two weeks",
        "three days",
        "about a month",
        "six weeks",
        "almost a year",
        "ten days",
    ],
    "trip": ["a long weekend", "five days", "a week", "two weeks", "ten days"],
    "hours": ["six", "eight", "twelve", "twenty-four"],
    "amount": ["$4.99", "$12.50", "$35", "$79", "$2.10", "$150"],
    "debt": ["student loan", "car loan", "credit card balance", "personal loan"],
    "invest": [
        "an index fund",
        "my retirement account",
        "a high-yield savings account",
        "treasury bonds",
    ],
    "account": ["checking account", "brokerage account", "credit card", "savings account"],
    "part": ["zipper", "handle", "seam along the side", "power button", "hinge", "sole", "strap"],
    "failure": ["come loose", "crack", "fray", "stop working", "peel off", "squeak"],
    "praise": [
        "it was easy to set up and still works perfectly after months",
        "it feels solid and the battery lasts far longer than advertised",
        "it is quiet, simple to clean, and looks good on the counter",
        "the fit is true to size and it kept me dry in a downpour",
    ],
    "cs_adj": ["slow to respond", "friendly and quick", "hard to reach", "surprisingly helpful"],
    "prod_adj": ["decent", "excellent", "just okay", "a bit flimsy", "great value"],
    "fail": [
        "dense and gummy",
        "too salty",
        "dry in the middle",
        "burnt on the bottom",
        "bland",
        "soggy",
    ],
    "temp": ["350", "375", "400", "425", "180 Celsius", "200 Celsius"],
    "minutes": ["20", "25", "35", "45", "50", "60"],
    "team_a": [
        "Riverside United",
        "the Northern Hawks",
        "Porto Azul",
        "the Harbor City Mariners",
        "Lakeside Rovers",
    ],
    "team_b": [
        "the Valley Wolves",
        "Eastport Athletic",
        "the Granite Bears",
        "Westfield Town",
        "the Capital Comets",
    ],
    "score": ["2-1", "3-0", "1-0", "4-3", "2-2 before winning on penalties"],
    "race": ["half marathon", "marathon", "10K", "trail ultra", "sprint triathlon"],
    "activity": ["running", "weight training", "a long bike ride", "yoga", "swimming laps"],
    "reason": [
        "a few nail holes in the wall",
        "normal carpet wear",
        "cleaning the oven",
        "repainting one room",
        "a late final rent payment",
    ],
    "jurisdiction": ["California", "Ontario", "England", "New South Wales", "Texas", "Ireland"],
    "asset": ["joint bank account", "family house", "retirement account", "small business", "car"],
    "votes": ["7-2", "5-4", "unanimously", "6-3"],
    "project": [
        "bike lane network",
        "public library branch",
        "flood barrier",
        "housing development",
        "tram line",
    ],
    "event": ["music festival", "marathon", "trade fair", "graduation ceremony", "film festival"],
    "delay_reason": [
        "the heat wave",
        "a shortage of volunteers",
        "ongoing construction",
        "safety concerns",
        "the storm forecast",
    ],
    "industry": ["semiconductor", "airline", "retail", "biotech", "streaming", "shipping"],
    "pct": ["4", "7", "12", "3.5", "18"],
    "storm": ["tropical storm", "winter storm", "cold front", "line of thunderstorms"],
    "page": ["Account Settings", "Billing", "Subscriptions", "Profile", "Notifications"],
    "action_faq": [
        "cancel your plan",
        "switch to annual billing",
        "change your payment method",
        "pause your membership",
        "download your invoices",
    ],
    "n": ["3", "5", "7", "10", "14"],
    "warranty": ["one", "two", "three", "five"],
    "phenomenon": [
        "ice float on water",
        "the moon always show the same face to Earth",
        "bread go stale faster in the fridge",
        "the ocean look blue",
        "metal feel colder than wood at the same temperature",
        "a rainbow form after rain",
        "popcorn pop",
        "your voice sound different on a recording",
    ],
    "finding": [
        "people who walked after meals had lower blood sugar spikes",
        "bees can learn to recognize simple patterns",
        "coral reefs recovered faster in areas with less fishing",
        "the new battery chemistry lost less capacity in the cold",
        "children who slept more scored better on memory tasks",
        "some bacteria can break down certain plastics",
    ],
    "concept": [
        "public key encryption",
        "compound interest",
        "a heat pump",
        "an mRNA vaccine",
        "GPS",
        "noise cancellation",
        "a neural network",
    ],
    "device2": DEVICES,
    "tip": [
        "a hotter oven and a lower rack",
        "patting everything dry before it goes in",
        "spreading it out so the pieces don't touch",
        "a thin layer of grated parmesan on top",
        "finishing it under the grill for two minutes",
    ],
    "concept_pair": [
        "a shallow copy and a deep copy",
        "a thread and a process",
        "an interface and an abstract class",
        "a promise and a callback",
        "composition and inheritance",
        "a mutex and a semaphore",
    ],
    "component": ["integration test", "database migration", "docker build", "lint", "end-to-end"],
    "age": ["two", "six", "twelve", "sixteen"],
    "cause": [
        "a cold",
        "a long flight",
        "starting a new medication",
        "a dental procedure",
        "a minor fall",
    ],
    "loan": ["mortgage", "car loan", "home equity loan", "small business loan"],
}

MEDIUM_TEMPLATES = [
    # tech support
    "My {device} keeps {problem_ing} after the latest update, and restarting it only helps for a few minutes.",
    "The {device} shows a blinking orange light and nothing happens when I hold the power button.",
    "After I changed the router password, the {device} no longer connects and the setup app says the network cannot be found.",
    "I've reinstalled the driver twice, but the {device} still isn't recognized when I plug it into the USB-C port.",
    "How do I stop my {device} from installing updates automatically in the middle of the night?",
    "Is it normal for a brand new {device} to get this warm while it's charging?",
    "Ever since I spilled a little water near it, my {device} has been {problem_ing}.",
    # e-commerce
    "I ordered a {product} on {weekday} with two-day shipping, but the tracking page hasn't updated since it left the warehouse.",
    "Can I exchange the {product} for a different size if I've already removed the tags?",
    "The {product} arrived with a scratch on the side, so I'd prefer a replacement rather than a refund.",
    "Do you ship to {country}, and are import duties included in the price of the {product}?",
    "I was charged twice for the same {product} and only one package showed up at my door.",
    "Is the {product} listed on this page the current model or last year's version?",
    # reviews
    "The {product} looks great, but after {duration} of daily use the {part} started to {failure}.",
    "Honestly the best {product} I've owned: {praise}.",
    "Customer service was {cs_adj}, but the {product} itself is {prod_adj} for the price.",
    "I returned the first {product} because the {part} would {failure}, and the replacement has the same problem.",
    "Bought this {product} as a gift and my sister loves it; {praise}.",
    # medicine
    "I've had {symptom} for {duration} and over-the-counter painkillers don't seem to help anymore.",
    "Is it safe to take {drug} on an empty stomach, or should it always be taken with food?",
    "My doctor prescribed {drug}, and I'm wondering whether it interacts with {supplement}.",
    "How long does {symptom} usually last after {cause}?",
    "Children under {age} should not be given {drug} without checking with a pharmacist first.",
    "I missed a dose of {drug} this morning; should I take it now or wait until tomorrow?",
    # travel
    "We're planning {trip} in {city} in {month} and would love suggestions for walkable neighborhoods that aren't too touristy.",
    "My connecting flight through {city} was cancelled and the airline is offering a voucher instead of a refund.",
    "Do I need a transit visa if my layover in {city} is shorter than {hours} hours and I stay inside the airport?",
    "What's the cheapest way to get from the airport to downtown {city} late at night?",
    "The hotel in {city} charged a resort fee that wasn't shown anywhere when I booked.",
    "Is it realistic to take the train from {city} to {city2} in a single day, or should we break up the trip?",
    # finance
    "Should I pay off my {debt} faster or put the extra money into {invest}?",
    "My {account} statement shows a fee of {amount} that I don't recognize.",
    "The bank approved the {loan}, but the interest rate is higher than the estimate I was given.",
    "If I move abroad to {country}, do I still need to file taxes where I used to live?",
    "Is it a bad idea to keep my whole emergency fund in {invest}?",
    # science
    "Why does {phenomenon}?",
    "Researchers reported that {finding}, although the study was small and has not been replicated.",
    "Can someone explain in simple terms how {concept} actually works?",
    "A new paper suggests that {finding}, which surprised several scientists who were not involved.",
    # cooking
    "Can I substitute {sub} in {baked}, or will it change the texture too much?",
    "My {baked} always comes out {fail}; what am I doing wrong?",
    "How long can leftover {dish} stay in the fridge before it should be thrown out?",
    "Preheat the oven to {temp} degrees and bake the {baked} for {minutes} minutes, or until the top is golden.",
    "Does {dish} taste better the next day, or is that just something people say?",
    # sports
    "{team_a} beat {team_b} {score} on {weekday} night, with the decisive goal coming in the final minutes.",
    "What's a reasonable weekly mileage for someone training for their first {race}?",
    "Is it better to stretch before or after {activity}, or does it not really matter?",
    "I signed up for a {race} in {month} but I've never run more than five kilometers.",
    # legal
    "Can my landlord keep the whole security deposit for {reason}?",
    "Does a verbal agreement count as a binding contract in {jurisdiction}?",
    "What happens to a {asset} if someone dies without a will in {jurisdiction}?",
    "If I get a parking ticket in a rental car, is the rental company allowed to add an administration fee of {amount}?",
    # FAQ answers
    "You can {action_faq} at any time from the {page} page; changes take effect at the start of your next billing cycle.",
    "Refunds for {product} orders are usually processed within {n} business days, although your bank may take longer to show the credit.",
    "Yes, every {product} comes with a {warranty}-year limited warranty that covers manufacturing defects but not accidental damage.",
    "Orders placed before 2 p.m. on a {weekday} normally ship the same day, except during public holidays.",
    # news-like
    "The city council voted {votes} on {weekday} to approve a new {project}, ending months of debate.",
    "Organizers said the {event} would be postponed until {month} because of {delay_reason}.",
    "Shares of the {industry} company fell {pct} percent after it lowered its forecast for the rest of the year.",
    "A {storm} is expected to bring heavy rain and strong winds to the coast through {weekday}.",
    "Residents of {city} will pay slightly more for water starting in {month}, the utility announced.",
    # code-related
    "What's the cleanest way to {code_task} in {language} if the code also has to run on an older version?",
    "Why does my script raise a {pyerror} only when it runs inside the Docker container?",
    "What's the actual difference between {concept_pair}, and when should I use each one in {language}?",
    "My unit tests pass locally but fail in CI with a timeout during the {component} step.",
    "Is there an idiomatic way to {code_task} in {language}, or should I just write a loop?",
    "The {device} I bought in {month} already needs a repair, and the shop says the warranty doesn't cover it.",
    "We booked a table in {city} for {weekday} evening, but the restaurant cancelled our reservation an hour before.",
    "Does {supplement} really help with {symptom}, or is the evidence mostly anecdotal?",
    "The recipe says to rest the {baked} overnight, but I only have a couple of hours; will it still work?",
    "A judge in {jurisdiction} ruled that the company must refund customers who were charged {amount} in hidden fees.",
    "My {device} and my {device2} both stopped connecting to the network on {weekday}, but everything else in the house works.",
    "Is the {product} machine-washable, or does it need to be cleaned by hand?",
    "I left a two-star review for the {product} because it arrived {duration} late and the box was soaked.",
    "My pharmacist said {drug} can make {symptom} worse in some people; is that common?",
    "We have {trip} in {country} in {month}; is it better to rent a car or rely on buses and trains?",
    "Does anyone know if the {city} metro runs all night on {weekday}s?",
    "I inherited a {asset} from my aunt in {jurisdiction}, and I have no idea what taxes apply.",
    "The {industry} startup raised new funding on {weekday} and plans to hire two hundred engineers in {city}.",
    "Our {race} training group meets every {weekday} morning at six, rain or shine.",
    "For crispier {crispy}, try {tip}.",
    "The {component} job started failing after we upgraded {language}, even though nothing else changed.",
    "Since switching to {invest}, I check my balance far less often and worry about it less.",
    "I keep getting a {pyerror} from a library I didn't even import directly; how do I find where it comes from?",
]

HANDWRITTEN_MEDIUM = [
    "The package says it was delivered, but it isn't at the front door or with any of the neighbors.",
    "Our dishwasher leaves a white film on every glass no matter which detergent we use.",
    "Please note that the pool will be closed for maintenance from Monday until Thursday.",
    "I think the thermostat is reading the temperature wrong because the hallway is always cold.",
    "Tap water in most of the city is safe to drink, but many locals still prefer filtered water.",
    "The museum is free on the first Sunday of every month, so expect long lines before opening.",
    "She finished the last ten kilometers of the race with a stress fracture nobody knew about.",
    "Can I bring a power bank in my checked luggage, or does it have to stay in my carry-on?",
    "The recipe calls for two eggs, but one egg plus a spoonful of yogurt works just as well.",
    "He asked whether the warranty would still be valid if he replaced the battery himself.",
    "Interest is calculated daily and paid into your account on the last business day of each month.",
    "The new version fixes a crash that happened when exporting large spreadsheets to PDF.",
    "Wear comfortable shoes, because the walking tour covers roughly six kilometers of cobblestones.",
    "If the rash spreads or you develop a fever, stop using the cream and call your doctor.",
    "Our office will be closed on the public holiday, and support tickets will be answered the next day.",
    "I love how light this tent is, but setting it up alone in the wind is a real challenge.",
    "The contract can be terminated by either party with thirty days of written notice.",
    "Why does my sourdough starter smell like nail polish remover after a few days in the fridge?",
    "Traffic on the bridge is backed up for three miles because of a stalled truck in the left lane.",
    "We recommend backing up your files before upgrading, just in case something goes wrong.",
    "The bakery on the corner sells out of croissants by nine, so get there early.",
    "Could you explain why my electricity bill doubled even though we were away for two weeks?",
    "This blender is loud enough to wake the whole house, but it makes the smoothest smoothies I've had.",
    "The study followed more than two thousand participants for over a decade.",
    "Make sure the cable is fully seated in the port; a loose connection is the most common cause.",
    "Tickets are non-refundable, but you can transfer them to another person up to 24 hours before the show.",
    "He scored twice in the first half and then limped off with what looked like a hamstring injury.",
    "Is there any way to recover a document I closed without saving?",
    "Both tenants are jointly responsible for the full amount of rent, not just their own share.",
    "The soup is better if you let the onions cook slowly until they're deep brown.",
    "I tried the chat support three times and got disconnected every time before reaching a person.",
    "A sudden drop in air pressure usually means a storm is on the way.",
    "Our flight was delayed four hours, and the only food available at the gate was vending machine snacks.",
    "The function returns None instead of raising an exception when the key is missing.",
    "Use a pull request template so reviewers know what changed and how it was tested.",
    "Most banks let you freeze your card instantly from the app if you think it was stolen.",
    "The hotel breakfast was nothing special, but the view from the rooftop made up for it.",
    "Store the batteries in a cool, dry place and keep them away from metal objects like keys or coins.",
    "The app asks for location access even though it has nothing to do with maps.",
    "Please bring a photo ID and your booking reference when you collect the keys.",
    "I can't log in on my phone, although the same password works fine on my laptop.",
    "The printer says it's out of cyan, but I only ever print in black and white.",
    "Every time I plug in the second monitor, all my windows jump to the wrong screen.",
    "My smart speaker answers questions nobody asked, usually in the middle of the night.",
    "The replacement charger I bought online gets hot enough that I'm afraid to leave it plugged in.",
    "I accidentally ordered two of the same lamp; can I cancel one before it ships?",
    "The coupon disappeared from my cart when I changed the delivery date.",
    "The sweater is lovely, but the sleeves are at least five centimeters too long.",
    "These boots were comfortable straight out of the box and didn't need any breaking in.",
    "Five stars for the speaker, zero stars for the packaging, which was mostly air.",
    "My knee clicks when I go up stairs, but it doesn't hurt; should I be worried?",
    "She was told to avoid grapefruit while taking her cholesterol medication.",
    "The clinic only takes walk-in patients before ten in the morning on weekdays.",
    "Is a fever of 38 degrees in a toddler something to treat at home or a reason to call the doctor?",
    "We missed the last ferry and ended up sleeping in a very expensive hotel by the port.",
    "The night train was cheaper than a hotel and we woke up in a different country.",
    "Our rental car came with a nearly empty tank even though the contract said full-to-full.",
    "Does travel insurance cover a missed connection if the first flight was on a different ticket?",
    "I just realized I've been paying for two streaming services that I never use.",
    "My credit score dropped forty points after I closed my oldest credit card.",
    "Is it worth refinancing if rates have dropped by only half a percent?",
    "The budget spreadsheet finally made us realize how much we spend on takeaway.",
    "Scientists drilled nearly three kilometers into the ice to recover air bubbles trapped for thousands of years.",
    "Octopuses can change both the color and the texture of their skin in a fraction of a second.",
    "The telescope will spend its first year mapping the positions of a billion stars.",
    "If you heat milk too quickly, it forms a skin and can scorch on the bottom of the pan.",
    "I doubled the garlic, skipped the cream, and honestly it was better than the original recipe.",
    "Let the steak rest for five minutes before slicing so the juices stay inside.",
    "Why do my cookies spread into one giant flat sheet on the baking tray?",
    "The goalkeeper saved two penalties in the shootout to send his team into the final.",
    "After three knee surgeries, she announced that this season would be her last.",
    "The rain delay lasted nearly two hours, and half the crowd had gone home before play resumed.",
    "My neighbor's tree dropped a branch on my car; whose insurance is supposed to pay?",
    "The company changed its privacy policy and now shares purchase history with advertisers by default.",
    "Do I need to register a trademark before I start selling products under my brand name?",
    "You will receive a confirmation email within a few minutes; check your spam folder if it doesn't arrive.",
    "Gift cards cannot be exchanged for cash and do not expire.",
    "We currently deliver to addresses in the mainland only, not to islands or overseas territories.",
    "The library will extend its opening hours during the exam period starting next week.",
    "Heavy snow closed the mountain pass overnight, stranding dozens of trucks.",
    "The central bank left interest rates unchanged but signaled that cuts could come later this year.",
    "After the merge, the build fails with an import error that only happens on Windows.",
    "Should configuration live in environment variables or in a YAML file checked into the repository?",
    "The query is fast with ten thousand rows but takes minutes once the table grows past a million.",
    "I'm trying to understand why my Docker image is two gigabytes when the app itself is tiny.",
    "Why does git say my branch has diverged when I haven't committed anything?",
    "Our cat refuses to use the new litter box and keeps sitting next to it instead.",
    "The elevator in our building has been out of service for three weeks and nobody will say when it will be fixed.",
    "I'm not sure whether to buy a used car with low mileage or a newer one with more kilometers on it.",
    "The wedding venue wants a deposit of half the total cost a full year in advance.",
    "Could someone recommend a beginner-friendly hike near the city that takes under three hours?",
    "The volunteers cleaned up more than two tonnes of rubbish from the beach in a single morning.",
    "Turn off the water supply before you try to replace the tap washer.",
    "Our toddler only sleeps if someone sits next to the crib, which makes evenings very long.",
    "The band announced a reunion tour, and tickets sold out within eleven minutes.",
    "I planted tomatoes too early and a late frost killed all of them.",
    "The survey takes about ten minutes and your answers are completely anonymous.",
    "It was the hottest July on record, and several cities opened cooling centers for the elderly.",
    "He forgot his laptop charger at the hotel and the front desk agreed to mail it back to him.",
]

# ---------------------------------------------------------------------------
# Hand-written long passages (60-200 words)
# ---------------------------------------------------------------------------

HANDWRITTEN_LONG = [
    "I bought this espresso machine about eight months ago after my old one finally gave up. For the first few months it was fantastic: the shots were consistent, the steam wand heated milk quickly, and cleanup took less than a minute. Around month five, though, the pump started making a rattling noise and the pressure gauge began jumping around. I descaled it twice, following the manual exactly, and replaced the water filter, but nothing changed. Customer support asked me to send a video, which I did, and then I waited eleven days for a reply that simply told me to descale it again. I eventually paid a local repair shop to look at it, and they found a cracked internal hose that should have been covered by the warranty. I'd give the coffee five stars and the support one star.",
    "To reset your router to factory settings, locate the small recessed button on the back panel, usually labeled Reset. With the router powered on, press and hold the button with a paperclip for at least ten seconds, until the status light starts blinking. Release the button and wait two or three minutes while the device restarts. Once the light turns solid, connect to the default network name printed on the sticker underneath the router and open the setup page in your browser. Keep in mind that a reset erases every custom setting, including your network name, password, port forwarding rules, and parental controls, so write those down first if you will need them again.",
    "We spent five days in Kyoto in early November and the timing could not have been better. The maple trees in the northern temples were just starting to turn, the mornings were crisp, and the afternoons were warm enough for a light jacket. We bought a prepaid transit card at the station and used buses for almost everything, although they get very crowded around the famous shrines after ten in the morning. Our best decision was visiting the big sights at opening time and saving the afternoons for wandering small side streets, where we found tiny bakeries, a knife shop that has been run by the same family for generations, and a public bath that cost less than a coffee. If you go, book accommodation early, because autumn is peak season.",
    "Ibuprofen belongs to a class of medicines called non-steroidal anti-inflammatory drugs. It reduces pain, fever and inflammation by blocking enzymes that produce prostaglandins. For most healthy adults, occasional use at the dose printed on the package is considered safe, but it should be taken with food or milk to reduce the risk of stomach irritation. People with a history of stomach ulcers, kidney disease, heart failure or uncontrolled high blood pressure should speak to a doctor before using it. It can also interact with blood thinners, some antidepressants and certain blood pressure medications. If you need pain relief for more than ten days in a row, or if the pain keeps getting worse, it is a good idea to get a proper diagnosis rather than continuing to self-treat.",
    "The city council approved a plan on Tuesday night to convert two lanes of the main riverside road into a protected bike path, after a meeting that stretched past midnight. Supporters argued the change would reduce accidents and encourage more people to cycle to work, pointing to a similar project in a neighboring town where bike traffic tripled within two years. Business owners along the route were divided. Some welcomed the idea of more foot traffic, while others warned that losing parking spaces would drive customers away. Construction is expected to begin in the spring and take about eight months. The council also asked city staff to report back after the first year with data on traffic delays, collisions, and sales figures reported by local shops.",
    "When you call a function with a mutable default argument in Python, such as an empty list, the default object is created only once, when the function is defined, not every time the function is called. That means if the function appends to the list, the changes persist between calls, which often looks like a mysterious bug. The usual fix is to use None as the default and create a new list inside the function body when the argument is None. Linters such as pylint and ruff will warn about this pattern, so it is worth enabling those checks in your continuous integration pipeline.",
    "Our return policy is simple. You can return most unused items within thirty days of delivery for a full refund to the original payment method. Items must be in their original packaging with all accessories and manuals included. To start a return, sign in to your account, open the order, and choose Return an item; you will receive a prepaid shipping label by email. Some products cannot be returned for hygiene reasons, including opened earbuds, swimwear without the hygiene liner, and personal care items. Refunds are issued within five business days after the returned item reaches our warehouse and passes inspection. If an item arrived damaged or is not what you ordered, contact us within forty-eight hours and we will arrange a free replacement.",
    "Making a good risotto is less about constant stirring than people think and more about patience and temperature. Start by warming the stock in a separate pot so it never cools the rice down. Sweat a finely chopped onion in butter until it is soft but not browned, then add the rice and toast it for a minute or two until the edges look translucent. Pour in a splash of white wine and let it evaporate completely. After that, add hot stock one ladle at a time, stirring every minute or so, and wait until each addition is mostly absorbed before adding the next. After about eighteen minutes, taste a grain: it should be tender with a slight bite in the center. Take the pot off the heat, beat in cold butter and grated parmesan, cover it, and let it rest for two minutes before serving.",
    "Compound interest means you earn interest not only on the money you originally saved but also on the interest that has already been added. Suppose you put one thousand dollars into an account that pays five percent a year. After the first year you have one thousand and fifty dollars. In the second year you earn five percent on that new amount, so you end up with one thousand one hundred and two dollars and fifty cents rather than one thousand one hundred. The difference looks tiny at first, but over twenty or thirty years it grows dramatically, which is why financial planners encourage people to start saving early, even in small amounts. The same effect works against you with credit card debt, where unpaid interest is added to the balance and then charged interest itself.",
    "The home team looked nervous for most of the first half and fell behind after a defensive mix-up in the twentieth minute, when the goalkeeper and a center back both went for the same high ball. The coach made two substitutions at halftime, moving to a back three and bringing on a young winger who had only played a handful of senior matches. The change worked almost immediately. The winger created the equalizer with a low cross in the fifty-fifth minute and then won the penalty that put his side ahead with ten minutes left. The visitors pushed hard in stoppage time and hit the crossbar from a free kick, but the lead held. The result lifts the club out of the relegation zone for the first time since October.",
    "Under most residential lease agreements, a landlord may deduct from the security deposit only for unpaid rent and for damage beyond normal wear and tear. Normal wear and tear includes things like faded paint, small nail holes from hanging pictures, and carpet that has thinned in high-traffic areas. Damage, on the other hand, would include large holes in walls, broken appliances, pet stains, or burns in countertops. In many places the landlord must return the deposit, together with an itemized list of any deductions, within a fixed number of days after the tenant moves out. Tenants are strongly advised to take dated photographs of every room at both move-in and move-out, and to keep copies of all written communication, because these records are often decisive if the dispute goes to small claims court.",
    "Photosynthesis is the process plants, algae and some bacteria use to turn light energy into chemical energy. Inside the chloroplasts, chlorophyll absorbs mostly red and blue light, which is why leaves look green to us. That absorbed energy is used to split water molecules, releasing oxygen as a by-product, and to build energy-carrying molecules. In a second set of reactions, the plant uses those molecules to fix carbon dioxide from the air into sugars. The overall reaction is often summarized as carbon dioxide plus water, in the presence of light, producing glucose and oxygen.",
    "Hi, I'm writing about order number ending in 4471. I ordered a standing desk on the twelfth and received two boxes last week, but when I started assembling it I realized one of the legs is missing its motor cable and the control panel has a cracked screen. The outer box looked fine, so I think this happened before shipping. I've attached photos of both parts and the labels on the boxes. I don't want to return the whole desk, since it's already half assembled and very heavy, so could you please just send the replacement cable and control panel? I'm home most weekdays after three in the afternoon if a courier needs a signature. Thank you for your help.",
    "I've been getting a strange error when I run our test suite in CI. Locally everything passes in about forty seconds, but on the build server the integration tests hang for ten minutes and then fail with a connection timeout to the database container. I checked the compose file and the database service is healthy according to its own health check. The only difference I can see is that the CI runner uses a different network mode, and our test configuration points to localhost instead of the service name. Has anyone run into this before, and is there a clean way to make the host configurable without duplicating the whole settings file for each environment?",
    "Black holes form when a massive star runs out of fuel and its core collapses under its own gravity. If the remaining core is heavy enough, no known force can stop the collapse, and it shrinks to a point of extremely high density. Around that point is a boundary called the event horizon; anything that crosses it, including light, cannot escape. Black holes are not cosmic vacuum cleaners, though. From far away, a black hole pulls on nearby objects exactly as a star of the same mass would. Astronomers detect them indirectly, by watching stars orbit something invisible, by observing hot gas glowing as it spirals inward, or by measuring gravitational waves produced when two black holes merge.",
    "Thank you for contacting us about your subscription. We can confirm that your plan was renewed automatically on the first of the month because auto-renew was switched on in your account. We understand that you did not intend to continue, and as a one-time courtesy we have cancelled the subscription and issued a full refund for the latest charge. You should see the money back on your card within five to ten business days, depending on your bank. Your access will remain active until the end of the current period, so you can still download any files you need. If you would like to subscribe again in the future, your saved projects will be kept for ninety days.",
    "A good first marathon plan usually lasts sixteen to twenty weeks and builds mileage gradually, increasing the weekly total by no more than about ten percent at a time. Most of the running should be done at an easy, conversational pace, with one long run each weekend that slowly grows from around twelve kilometers to thirty or thirty-two. Many plans add one session of faster running each week, such as intervals or a tempo run, but beginners can get to the finish line without much speed work at all. Every third or fourth week should be lighter to let the body adapt. In the final two or three weeks, the plan tapers, cutting volume sharply so that you arrive at the start line rested. Practice your race-day breakfast, shoes and energy gels on long runs so that nothing on the day is new.",
    "Before you take out a mortgage, it helps to understand the difference between the interest rate and the annual percentage rate. The interest rate is the cost of borrowing the principal, expressed as a yearly percentage. The annual percentage rate, or APR, includes the interest rate plus other costs such as origination fees, mortgage broker fees and some closing costs, so it gives a more complete picture of what the loan will actually cost. When comparing offers from different lenders, compare APRs rather than headline rates, and ask for a written loan estimate so you can line up the fees side by side.",
    "The software update released this morning changes how the app handles offline mode. Previously, any edits made without an internet connection were stored locally and uploaded when the connection returned, but conflicts with changes made on other devices were resolved by simply keeping the most recent version. That caused some users to lose work. The new version keeps both copies when it detects a conflict and asks which one to keep, showing the differences side by side. The update also reduces battery usage during background sync and fixes a bug where notifications appeared twice on some tablets. It will roll out gradually over the next week, and users who want it immediately can check for updates manually in the settings menu.",
    "We stayed three nights at this small guesthouse near the harbor and would happily go back. The rooms are simple but spotless, the beds are comfortable, and the owner gave us a hand-drawn map with her favorite places to eat, which turned out to be much better than anything we found online. Breakfast was homemade bread, local cheese, fruit and strong coffee served on a terrace overlooking the boats. The only downsides are the steep stairs, which could be hard for anyone with mobility issues, and the noise from the fish market early in the morning, so bring earplugs if you're a light sleeper.",
    "Type 2 diabetes develops when the body becomes resistant to insulin or does not produce enough of it to keep blood sugar in a normal range. Early on it often causes no symptoms at all, which is why routine blood tests are important for people with risk factors such as a family history, excess weight, or high blood pressure. When symptoms do appear, they can include increased thirst, frequent urination, tiredness, blurred vision, and cuts that heal slowly. Treatment usually starts with changes to diet and physical activity, and many people are also prescribed metformin. Over time, some patients need additional medicines or insulin. Keeping blood sugar, blood pressure and cholesterol under control greatly reduces the risk of complications affecting the eyes, kidneys, nerves and heart.",
    "If your laptop suddenly becomes slow, start with the simple checks before assuming the hardware is failing. Open the task manager and sort processes by CPU and memory usage; a single browser tab or a stuck update can easily use most of the available resources. Make sure the disk is not almost full, because many operating systems slow down dramatically when free space drops below ten percent. Check whether the power settings switched to a battery-saving profile, which can limit processor speed. Run a malware scan, and look at which programs start automatically at login. If none of this helps and the laptop also feels hot, the cooling fan may be clogged with dust, which causes the processor to throttle itself to avoid overheating. Cleaning the vents with compressed air often makes a surprising difference.",
    "Is there a way to sort a list of dictionaries in Python by two keys, one ascending and one descending? I have a list of records with a name and a score, and I want the highest scores first, but when two people have the same score I want them in alphabetical order by name. I tried calling sorted with reverse set to True, but that also reverses the names.",
    "Sourdough bread relies on a starter, which is a mixture of flour and water that has been colonized by wild yeast and lactic acid bacteria. Feeding the starter regularly keeps those microbes active. When you mix a portion of the starter into dough, the yeast produces carbon dioxide that makes the bread rise, while the bacteria produce acids that give the loaf its tangy flavor and help it keep longer. Because wild yeast works more slowly than commercial yeast, sourdough needs a long fermentation, often overnight in the fridge, which also develops a more complex taste and a chewy, open crumb.",
    "Hey everyone, quick question about travel insurance. My partner and I are booking a three-week trip through Southeast Asia next spring, and most of the policies I've looked at seem to exclude anything related to motorbike accidents unless you hold a full motorcycle license at home. We were planning to rent scooters on a couple of islands. Does anyone know a provider that covers this, or is it better to just avoid scooters and use taxis instead? Also, is it worth paying extra for cancellation cover if our flights are already refundable?",
    "A power of attorney is a legal document that lets one person, called the agent, act on behalf of another person, called the principal. A general power of attorney gives broad authority over financial and legal matters, while a limited one covers only specific tasks, such as selling a particular property. A durable power of attorney remains valid if the principal later loses the capacity to make decisions, which is why it is commonly used in planning for old age or serious illness. The requirements for signing, witnessing and registering the document differ between jurisdictions, so it is usually sensible to have a lawyer draft or review it.",
    "Two stars. The headphones sound good and the noise cancellation works well on planes, which is why I'm not giving one star. But the build quality is disappointing for the price. The plastic hinge on the left side cracked after about three months even though I always kept them in the case. The ear cushions also started peeling, leaving little black flakes on my face. The app keeps asking me to create an account just to change the equalizer settings, and the battery, which was supposed to last thirty hours, barely makes it through a long workday now.",
    "Astronomers announced on Thursday that they had detected water vapor in the atmosphere of a planet orbiting a small red star about one hundred light-years away. The planet is roughly twice the size of Earth and orbits within the zone where temperatures could allow liquid water on the surface, although the researchers cautioned that this does not mean the planet is habitable. Red dwarf stars often produce powerful flares that could strip away an atmosphere over time. The team used a space telescope to measure how starlight filtered through the planet's atmosphere as it passed in front of its star. They plan further observations next year to look for other molecules, including carbon dioxide and methane.",
    "Frequently asked question: can I change my flight after booking? Yes, in most cases. Flexible and standard fares can be changed online in Manage Booking up to two hours before departure. If the new flight costs more, you will pay the difference in fare; if it costs less, the difference is returned as a travel credit for standard fares or to your card for flexible fares. Basic fares cannot be changed, but you may cancel within twenty-four hours of booking for a full refund if the departure is at least seven days away. Name changes are not permitted, although you can correct a spelling mistake of up to three letters free of charge by contacting customer service.",
    "I'm trying to understand the difference between a process and a thread. From what I've read, a process has its own memory space, while threads inside the same process share memory, which makes communication between threads faster but also easier to get wrong because of race conditions. In Python specifically, people say threads don't help with CPU-heavy work because of the global interpreter lock, so you should use multiprocessing instead. But then why do so many libraries use thread pools? Is it just for waiting on network requests and disk reads, where the lock gets released?",
    "Chili tastes best when it has time to develop, so I usually make it the day before. Brown the meat in batches so it sears instead of steaming, then set it aside and soften onions, peppers and garlic in the same pot. Toast the spices for a minute in the fat before adding tomatoes, a little stock, and the browned meat. A square of dark chocolate and a splash of vinegar near the end round out the flavor. Simmer for at least two hours with the lid slightly open, stirring now and then so it doesn't catch on the bottom, and add the beans for the last thirty minutes so they keep their shape.",
    "An index fund is a type of mutual fund or exchange-traded fund that aims to match the performance of a market index, such as a broad stock market index, rather than trying to beat it. Because the fund simply holds the same securities as the index, it requires little active management, which keeps costs low. Those lower fees matter over the long run: a difference of one percentage point per year can add up to a large share of your final balance after several decades. Index funds also offer instant diversification, since one fund may hold hundreds or thousands of companies. The trade-off is that you will never outperform the market; you accept the market's returns, both good years and bad ones.",
    "Flights were grounded across the region for most of Sunday after a software problem disrupted the air traffic control system, leaving thousands of passengers stranded in terminals. The authority responsible said the fault was not caused by a cyberattack and that a backup system had been activated within hours, but airlines warned that delays and cancellations would continue into Monday as aircraft and crews were out of position. Passengers were advised to check their flight status before traveling to the airport. Consumer groups reminded travelers that they may be entitled to meals, hotel accommodation and, in some cases, compensation, depending on the cause of the delay and the route.",
    "The new coffee grinder is a big step up from my old blade grinder. The burrs produce a much more even grind, which made an immediate difference in my pour-over, and there are enough settings to go from espresso to French press without any trouble. It is fairly quiet, and the static is manageable if you let the grounds sit for a few seconds before opening the container. My only complaints are that the hopper holds only about two hundred grams of beans, and cleaning the upper burr requires a small brush that isn't included. Still, for the price I'm very happy with it.",
    "Quick one: our React app re-renders the entire list every time a user types into the search box above it, and with a few thousand rows it becomes noticeably laggy. I've wrapped the row component in memo, but it still re-renders. The list items get an onClick handler created inline in the parent. Is that what's breaking memoization, and if so, is useCallback the right fix or should I restructure the component?",
    "I want to share my experience with the warranty process, because it was much better than I expected and might help someone else. My robot vacuum stopped charging about fourteen months after I bought it, just inside the two-year warranty. I opened a ticket through the website on a Sunday evening, attached a photo of the receipt and a short video of the dock's light refusing to come on, and assumed I would hear nothing for a week. Instead, an agent replied on Monday morning with a few troubleshooting steps: clean the charging contacts with a dry cloth, check that the dock was on a hard floor, and try a different outlet. None of that worked, so she sent me a prepaid label and asked me to ship only the dock, not the vacuum itself. Six days later a brand new dock arrived, along with a spare set of brushes and a short handwritten note. The vacuum has been charging normally ever since. The product is not perfect, since it still gets stuck under our sofa, but the support experience alone has convinced me to buy from this company again.",
    "Terms of service, section seven, limitation of liability. To the maximum extent permitted by applicable law, the company, its affiliates, officers, employees and agents shall not be liable for any indirect, incidental, special, consequential or punitive damages, or any loss of profits or revenues, whether incurred directly or indirectly, or any loss of data, use, goodwill or other intangible losses, resulting from your access to or use of, or inability to access or use, the service; any conduct or content of any third party on the service, including without limitation any defamatory, offensive or illegal conduct of other users or third parties; or unauthorized access, use or alteration of your transmissions or content. In no event shall the aggregate liability of the company for all claims relating to the service exceed the greater of one hundred dollars or the amount you paid the company, if any, in the past six months for the service giving rise to the claim. Some jurisdictions do not allow the exclusion of certain warranties or the limitation of liability for consequential damages, so some of the limitations above may not apply to you.",
    "Here is what happened at our team retrospective this week, for anyone who missed it. The main topic was the outage on Thursday, when the checkout service returned errors for roughly forty minutes during the evening peak. The root cause turned out to be a configuration change that lowered the database connection limit on the new replica, combined with a retry policy that multiplied the load as soon as the first requests started failing. Our alerts fired, but they went to a channel that nobody on call was watching, so the first person to notice was a customer support agent who saw the complaints piling up. We agreed on four actions. First, configuration changes to production databases will now require a second reviewer. Second, the retry policy will use exponential backoff with jitter and a hard cap. Third, paging alerts will go directly to the on-call phone rather than a chat channel. Finally, we will run a short game day next month to practice the failover procedure, since several people said they were not sure which runbook applied. Thanks to everyone who stayed late to help.",
    "Vaccines work by training the immune system to recognize a germ without exposing the body to the full disease. A vaccine contains a harmless piece or version of the germ, or instructions for the body's own cells to make a harmless piece of it. The immune system reacts by producing antibodies and memory cells. If the person later encounters the real germ, those memory cells recognize it quickly and mount a strong response before the infection can take hold. Some vaccines need booster doses because the immune memory fades over time or because the germ changes.",
]

# Sentence pools for composed long passages (each pool is one topic/voice).
PASSAGE_POOLS = {
    "tech": [
        "I've had this problem for about two weeks now and I'm running out of ideas.",
        "Every time the laptop wakes from sleep, the wifi adapter disappears from the device list.",
        "Restarting brings it back, but only until the next time the lid is closed.",
        "I already updated the network driver from the manufacturer's website and rolled back the last system update.",
        "Power management for the adapter is turned off, so Windows shouldn't be switching it off to save battery.",
        "The event log shows a warning about the adapter failing to start, but the error code doesn't match anything in the documentation.",
        "A USB wifi dongle works fine, which makes me think the operating system itself is okay.",
        "The laptop is just over a year old, so it might still be under the extended warranty.",
        "Before I send it in and lose it for two weeks, I'd like to rule out anything I can fix myself.",
        "Any suggestions would be really appreciated.",
    ],
    "review": [
        "I ordered the medium size based on the chart and it fits perfectly.",
        "The fabric feels thicker than I expected, which is great for autumn evenings.",
        "After three washes there is no shrinking or fading at all.",
        "The stitching around the pockets is neat and there were no loose threads anywhere.",
        "My only complaint is that the zipper sticks a little at the bottom.",
        "The color is slightly darker than in the product photos, closer to navy than royal blue.",
        "Shipping took nine days, which is longer than the estimate on the checkout page.",
        "It came in a plastic bag inside a much larger cardboard box, which felt wasteful.",
        "For the price, I think it's a solid buy and I'd probably order another color.",
        "I'd recommend sizing up if you plan to wear a thick sweater underneath.",
    ],
    "medicine": [
        "My father is seventy-two and was recently diagnosed with atrial fibrillation.",
        "His cardiologist started him on a blood thinner and a medication to slow his heart rate.",
        "Since then he has been bruising very easily, even from bumping into a table.",
        "He also feels more tired in the afternoons and has stopped his usual walks.",
        "He takes a daily baby aspirin that another doctor prescribed years ago.",
        "We're worried that combining the aspirin with the new blood thinner might be a problem.",
        "His next appointment isn't for another six weeks.",
        "The pharmacist said we should call the cardiologist's office rather than wait.",
        "I'd like to know which questions to ask so we make the most of the call.",
        "We're also wondering whether he should avoid certain foods or supplements.",
    ],
    "travel": [
        "We rented a car for the second half of the trip and it was absolutely the right call.",
        "The coastal road is narrow in places, but the views around every bend are worth it.",
        "Fuel stations are few and far between in the north, so fill up whenever you can.",
        "Many of the small villages have only one restaurant, and it often closes by eight.",
        "We booked most guesthouses a day or two ahead and never had trouble finding a room.",
        "The ferry to the island runs three times a day in summer but only once in the off-season.",
        "Bring layers, because the weather can change from sunshine to sideways rain in an hour.",
        "The hot springs outside town were the highlight, especially early in the morning before the tour buses arrive.",
        "Card payments are accepted almost everywhere, so we barely used cash.",
        "If we went back, we'd spend fewer nights in the capital and more time in the fjords.",
    ],
    "finance": [
        "I'm thirty-four, I have no debt apart from a small car loan, and I've just started a job with a better salary.",
        "My employer matches retirement contributions up to five percent of my pay.",
        "Right now I have about four months of expenses saved in a regular savings account earning almost nothing.",
        "I'm trying to decide how much to keep as an emergency fund and how much to invest.",
        "I'm also considering saving for a deposit on a small apartment within the next five years.",
        "A colleague suggested putting everything into a single technology fund, but that sounds risky.",
        "I'd prefer something low-cost and simple that I don't have to check every day.",
        "I don't really understand how the tax treatment differs between the account types.",
        "Should I pay off the car loan first, even though its interest rate is only three percent?",
        "Any general guidance on how to prioritize these goals would be helpful.",
    ],
    "cooking": [
        "This is the weeknight dinner I make more than any other.",
        "Start by roasting a tray of chopped vegetables with olive oil, salt and a pinch of chili flakes.",
        "While they roast, cook the pasta in well-salted water until it is just shy of al dente.",
        "Save a mug of the starchy cooking water before draining.",
        "Toss the pasta with the roasted vegetables, a handful of grated cheese and a splash of the reserved water.",
        "Keep tossing over low heat until the sauce turns glossy and clings to the pasta.",
        "A squeeze of lemon at the end brightens everything up.",
        "Leftovers keep for two days in the fridge and are surprisingly good cold.",
        "You can swap the vegetables depending on the season; squash in winter and zucchini in summer both work well.",
        "If you want more protein, stir in a can of drained chickpeas with the vegetables.",
    ],
    "sports": [
        "The match started at a frantic pace, with both sides pressing high from the first whistle.",
        "The visitors took the lead after only six minutes with a header from a corner.",
        "The home side responded well and dominated possession for the rest of the half.",
        "Their equalizer came just before halftime after a long spell of pressure.",
        "The second half was scrappier, with plenty of fouls and few clear chances.",
        "A red card in the seventieth minute changed the game completely.",
        "The winning goal was a deflected shot that left the goalkeeper stranded.",
        "The manager said afterwards that he was proud of the players' reaction after going behind.",
        "The result moves the team up to fourth place in the table.",
        "They travel away to face the league leaders next Saturday.",
    ],
    "legal": [
        "I signed a twelve-month lease in March, but my employer is transferring me to another city in September.",
        "The lease has an early termination clause requiring two months' notice and a fee equal to one month's rent.",
        "My landlord now says I also have to keep paying rent until a new tenant is found.",
        "That isn't written anywhere in the lease as far as I can tell.",
        "I've offered to help find a replacement tenant and even posted the listing myself.",
        "I have all of our communication by email, including his original approval of the clause.",
        "I'd rather not go to court, but I also don't want to pay rent on two places for months.",
        "Is the landlord allowed to add conditions that aren't in the signed agreement?",
        "Would a letter from a lawyer be enough, or do I need to file something formally?",
        "I'm in a state where tenants are generally considered well protected, if that matters.",
    ],
    "science": [
        "Researchers have spent decades trying to understand how migratory birds navigate over thousands of kilometers.",
        "Some species appear to use the position of the sun during the day and the stars at night.",
        "Others seem able to sense the Earth's magnetic field, although exactly how remains debated.",
        "One leading hypothesis involves light-sensitive proteins in the birds' eyes.",
        "Experiments with young birds raised indoors suggest that part of the route is inherited.",
        "Smell may also play a role, particularly for seabirds crossing open ocean.",
        "Tracking devices small enough for songbirds have only become available in the last few years.",
        "These devices have revealed that many birds make long non-stop flights over deserts and seas.",
        "Climate change is shifting the timing of migration for many species.",
        "Scientists worry that some birds may arrive too late to find the food they need.",
    ],
    "news": [
        "Officials confirmed on Wednesday that the bridge will remain closed for at least another month.",
        "Inspectors found deeper corrosion in the support beams than initial surveys suggested.",
        "The closure has added up to forty minutes to commutes for thousands of residents.",
        "Extra bus services have been added, but riders say they are often full by the second stop.",
        "Local businesses on both sides of the river report a sharp drop in customers.",
        "The transport department said safety had to come before convenience.",
        "A temporary pedestrian ferry will begin operating next week during peak hours.",
        "Opposition councillors criticized the lack of a maintenance plan in recent budgets.",
        "The repairs are now expected to cost nearly twice the original estimate.",
        "A public meeting to answer residents' questions is scheduled for Thursday evening.",
    ],
    "code": [
        "We have a small FastAPI service that reads messages from a queue and writes results to Postgres.",
        "Under light load everything is fine, but when traffic spikes the response times climb above five seconds.",
        "Profiling shows most of the time is spent waiting for database connections.",
        "The connection pool is set to ten connections, and we run four worker processes.",
        "I suspect some requests hold a connection open while they call an external API.",
        "Moving the external call outside the transaction helped a little but didn't solve the problem.",
        "We also noticed that the ORM issues one query per row when loading related objects.",
        "Switching to eager loading cut the number of queries from several hundred to three.",
        "I'm not sure whether we should increase the pool size or add a cache in front of the database.",
        "What metrics should we collect before deciding which direction to go?",
    ],
    "support": [
        "I'm contacting you for the third time about the same order, and I'd really appreciate a real answer this time.",
        "The order was placed five weeks ago and was supposed to arrive within ten working days.",
        "The tracking number you sent me has shown the same status, label created, since the day I ordered.",
        "Your chat assistant keeps telling me to wait another forty-eight hours.",
        "I was charged immediately, so the money has been gone from my account for over a month.",
        "If the item is out of stock, please just tell me and cancel the order.",
        "I don't want store credit or a discount code on my next purchase.",
        "I would like a full refund to my original payment method.",
        "I have kept screenshots of the order confirmation and every previous conversation.",
        "If I don't hear back by Friday, I'll ask my bank to reverse the charge.",
    ],
    "faq": [
        "Our standard plan includes up to five users, unlimited projects and fifty gigabytes of storage.",
        "You can add extra users at any time for a monthly fee per person, billed on a prorated basis.",
        "If you downgrade, files above the new storage limit become read-only but are never deleted automatically.",
        "All data is encrypted in transit and at rest, and backups are kept for thirty days.",
        "We offer a free trial of fourteen days, and no credit card is required to sign up.",
        "Students and registered non-profits receive half price on annual plans after verification.",
        "Invoices are sent by email on the first day of each billing period and are available in the dashboard.",
        "You can export all of your projects as a zip archive from the settings page.",
        "Support is available by email around the clock and by phone on weekdays during business hours.",
        "Accounts that stay inactive for more than two years are closed after two reminder emails.",
    ],
    "hotel": [
        "We stayed four nights in a junior suite on the seventh floor.",
        "Check-in was quick, and the receptionist upgraded us because it was our anniversary.",
        "The room was spacious and spotless, with a small balcony facing the old town.",
        "The air conditioning was noisy, though, and the thermostat never seemed to do anything.",
        "Breakfast had a huge selection, but the coffee from the machine was pretty weak.",
        "The rooftop pool was lovely in the late afternoon and rarely crowded.",
        "Street noise from the bars below lasted until about one in the morning on the weekend.",
        "The location is perfect for walking to the main sights and the train station.",
        "Parking costs extra and the garage entrance is very tight for larger cars.",
        "Overall we'd stay again, but we'd ask for a room on the courtyard side.",
    ],
}

# Hand-written paraphrase pairs (near-duplicates that share meaning, not surface).
PARAPHRASE_PAIRS = [
    ("How do I reset my password?", "What's the way to change my password if I forgot it?"),
    ("my phone won't charge anymore", "phone stopped charging"),
    (
        "The flight was delayed by three hours because of bad weather.",
        "Bad weather pushed our flight back three hours.",
    ),
    (
        "Can I return an item after 30 days?",
        "Is it possible to send something back more than thirty days after buying it?",
    ),
    ("What are the side effects of ibuprofen?", "ibuprofen side effects list"),
    ("best budget laptop for students", "cheap laptop good for college students"),
    ("The soup needs more salt.", "This soup could use a bit more salt."),
    (
        "How long should I boil an egg for a runny yolk?",
        "How many minutes do you boil eggs to keep the yolk soft?",
    ),
    (
        "The package arrived damaged and the box was crushed.",
        "My order showed up with a crushed box and broken contents.",
    ),
    ("Is it safe to drink tap water in Lisbon?", "can you drink the tap water in lisbon safely"),
    (
        "Stocks fell sharply after the central bank raised interest rates.",
        "The market dropped steeply once the central bank increased rates.",
    ),
    ("How do I merge two dictionaries in Python?", "python combine two dicts into one"),
    (
        "The hotel staff were friendly and the room was very clean.",
        "Very clean room, and everyone working at the hotel was lovely.",
    ),
    (
        "What is the capital gains tax rate for long-term investments?",
        "How much tax do you pay on long term capital gains?",
    ),
    (
        "I want to cancel my subscription and get a refund.",
        "Please cancel my plan and refund my last payment.",
    ),
    (
        "The team won the championship for the first time in forty years.",
        "For the first time in four decades, the team took the title.",
    ),
    (
        "Can my landlord enter the apartment without notice?",
        "Is a landlord allowed to come into my flat without telling me first?",
    ),
    (
        "Why does my code run slower inside a Docker container?",
        "my program is slower in docker than on my machine, why",
    ),
    (
        "The new update drains my battery really fast.",
        "Since the update my battery dies much quicker.",
    ),
    (
        "Light travels more slowly through water than through air.",
        "In water, light moves at a lower speed than it does in air.",
    ),
    ("How much water should I drink per day?", "daily recommended water intake"),
    (
        "This vacuum is powerful but incredibly loud.",
        "Strong suction, but the noise this vacuum makes is unbearable.",
    ),
    (
        "Doors open at seven and the show starts at eight.",
        "The show begins at 8 pm, with doors opening an hour earlier.",
    ),
    ("git revert vs git reset", "difference between git reset and git revert"),
    (
        "Do I need a visa to visit Japan for two weeks?",
        "Is a visa required for a 14-day trip to Japan?",
    ),
    (
        "Keep the dough covered and let it rise until doubled in size.",
        "Cover the dough and leave it until it has doubled.",
    ),
]

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

SLOT_RE = re.compile(r"\{(\w+)\}")


def norm(text: str) -> str:
    """Key used to avoid accidental duplicates among unrelated rows."""
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def words(text: str) -> int:
    return len(text.split())


def fill(rng: random.Random, template: str, vocab: dict[str, list[str]]) -> str:
    chosen: dict[str, str] = {}

    def pick(m: re.Match[str]) -> str:
        slot = m.group(1)
        options = vocab[slot]
        if slot.endswith("2") and slot[:-1] in chosen:  # {city2} differs from {city}
            options = [o for o in options if o != chosen[slot[:-1]]]
        chosen[slot] = rng.choice(options)
        return chosen[slot]

    text = SLOT_RE.sub(pick, template)
    # a/an agreement for filled slots
    text = re.sub(
        r"\b([Aa]) (?!one|use|uni|US)([aeiouAEIOU])", lambda m: m.group(1) + "n " + m.group(2), text
    )
    text = re.sub(
        r"\b([Aa])n ([bcdfgjklmnpqrstvwxyzBCDFGJKLMNPQRSTVWXYZ])",
        lambda m: m.group(1) + " " + m.group(2),
        text,
    )
    return text


SHORT_VOCAB = {
    "device": DEVICES,
    "problem": PROBLEMS,
    "product": PRODUCTS,
    "price": PRICES,
    "city": CITIES,
    "country": COUNTRIES,
    "month": MONTHS,
    "dish": DISHES,
    "baked": BAKED,
    "drug": DRUGS,
    "supplement": SUPPLEMENTS,
    "symptom": SYMPTOMS,
    "symptom2": SYMPTOMS,
    "language": LANGUAGES,
    "code_task": CODE_TASKS,
    "pyerror": PY_ERRORS,
    "fin": FIN_TERMS,
    "legal": LEGAL_TERMS,
    "sportq": SPORTS_Q,
    "sciq": SCIENCE_Q,
}


def wordset(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9']+", text.lower()))


class Pool:
    """Rows generated so far; rejects exact (normalised) repeats and rows whose
    word-set Jaccard similarity with an existing row reaches MAX_JACCARD."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.sets: list[frozenset[str]] = []

    def too_close(self, text: str) -> bool:
        if norm(text) in self.keys:
            return True
        ws = wordset(text)
        return any(len(ws & o) / len(ws | o) >= MAX_JACCARD for o in self.sets)

    def add(self, text: str) -> None:
        self.keys.add(norm(text))
        self.sets.append(wordset(text))


def gen_from_templates(
    rng: random.Random,
    pool: Pool,
    handwritten: list[str],
    templates: list[str],
    vocab: dict[str, list[str]],
    target: int,
    max_per_template: int,
    ok_len,
    restyle=None,
) -> list[str]:
    out: list[str] = []
    for t in handwritten:
        if pool.too_close(t):
            raise ValueError(f"hand-written row too close to an earlier one: {t!r}")
        pool.add(t)
        out.append(t)
    used: dict[str, int] = {}
    order = list(templates)
    for _round in range(max_per_template):
        rng.shuffle(order)
        for tpl in order:
            if len(out) >= target:
                return out
            if used.get(tpl, 0) > _round:
                continue
            for _ in range(60):
                t = fill(rng, tpl, vocab)
                if restyle is not None:
                    t = restyle(rng, t)
                if ok_len(t) and not pool.too_close(t):
                    break
            else:
                continue
            pool.add(t)
            used[tpl] = used.get(tpl, 0) + 1
            out.append(t)
    if len(out) < target:
        raise RuntimeError(f"only {len(out)} of {target} rows could be generated; add templates")
    return out


def restyle_query(rng: random.Random, q: str) -> str:
    # realistic casing mix: most queries lower-case, some capitalised or with "?"
    r = rng.random()
    if r < 0.12:
        return q[0].upper() + q[1:]
    if r < 0.17 and not q.endswith("?"):
        return q + "?"
    return q


def gen_short(rng: random.Random, pool: Pool) -> list[str]:
    return gen_from_templates(
        rng,
        pool,
        HANDWRITTEN_SHORT,
        SHORT_TEMPLATES,
        SHORT_VOCAB,
        N_SHORT,
        MAX_PER_SHORT_TEMPLATE,
        lambda t: 2 <= words(t) <= 6,
        restyle_query,
    )


def gen_medium(rng: random.Random, pool: Pool) -> list[str]:
    return gen_from_templates(
        rng,
        pool,
        HANDWRITTEN_MEDIUM,
        MEDIUM_TEMPLATES,
        MEDIUM_FILL,
        N_MEDIUM,
        MAX_PER_MEDIUM_TEMPLATE,
        lambda t: 7 <= words(t) <= 59,
    )


def gen_long(rng: random.Random, pool: Pool) -> list[str]:
    """Hand-written passages, plus two passages per sentence pool built from
    disjoint halves of the pool (kept in narrative order), so no two rows share
    a sentence."""
    out: list[str] = []
    for p in HANDWRITTEN_LONG:
        if not 60 <= words(p) <= 200 or pool.too_close(p):
            raise ValueError(f"bad hand-written passage: {p[:60]!r}")
        pool.add(p)
        out.append(p)
    for topic in sorted(PASSAGE_POOLS):
        sentences = PASSAGE_POOLS[topic]
        for _ in range(200):
            idx = list(range(len(sentences)))
            rng.shuffle(idx)
            half = len(idx) // 2
            parts = [
                " ".join(sentences[j] for j in sorted(idx[:half])),
                " ".join(sentences[j] for j in sorted(idx[half:])),
            ]
            if all(words(p) >= 60 for p in parts):
                break
        else:
            raise RuntimeError(f"pool {topic} too short")
        for p in parts:
            pool.add(p)
            out.append(p)
    return out


# --- near-duplicate transforms ----------------------------------------------

KEYBOARD_NEIGHBORS = {
    "a": "sq",
    "b": "vn",
    "c": "xv",
    "d": "sf",
    "e": "wr",
    "f": "dg",
    "g": "fh",
    "h": "gj",
    "i": "uo",
    "j": "hk",
    "k": "jl",
    "l": "k",
    "m": "n",
    "n": "bm",
    "o": "ip",
    "p": "o",
    "r": "et",
    "s": "ad",
    "t": "ry",
    "u": "yi",
    "v": "cb",
    "w": "qe",
    "y": "tu",
}


def typo(rng: random.Random, text: str) -> str:
    chars = list(text)
    n_edits = 1 if words(text) < 8 else rng.randint(2, 3)
    for _ in range(n_edits):
        positions = [
            i for i, c in enumerate(chars) if c.isalpha() and c.lower() in KEYBOARD_NEIGHBORS
        ]
        if not positions:
            break
        i = rng.choice(positions)
        kind = rng.choice(["swap", "drop", "neighbor", "double"])
        if kind == "swap" and i + 1 < len(chars) and chars[i + 1].isalpha():
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        elif kind == "drop":
            del chars[i]
        elif kind == "double":
            chars.insert(i, chars[i])
        else:
            rep = rng.choice(KEYBOARD_NEIGHBORS[chars[i].lower()])
            chars[i] = rep.upper() if chars[i].isupper() else rep
    return "".join(chars)


def casing(rng: random.Random, text: str) -> str:
    kind = rng.choice(["lower", "upper", "title", "sentence"])
    if kind == "lower" or (kind == "sentence" and text[:1].isupper()):
        return text.lower()
    if kind == "upper" and words(text) <= 12:
        return text.upper()
    if kind == "title" and words(text) <= 25:
        return " ".join(w[:1].upper() + w[1:] for w in text.split())
    return text[:1].upper() + text[1:] if text[:1].islower() else text.lower()


def punctuation(rng: random.Random, text: str) -> str:
    stripped = re.sub(r"[^\w\s'$-]", "", text)
    if stripped != text and rng.random() < 0.6:
        return re.sub(r"\s+", " ", stripped).strip()
    if text.endswith("?"):
        return text[:-1] + "??"
    if text.endswith("."):
        return text[:-1] + "!"
    return text + ("?" if rng.random() < 0.5 else ".")


LOWERABLE = {
    "the",
    "my",
    "our",
    "a",
    "an",
    "it",
    "this",
    "that",
    "can",
    "is",
    "do",
    "does",
    "how",
    "what",
    "why",
    "when",
    "if",
    "after",
    "before",
    "since",
    "honestly",
    "customer",
    "bought",
    "children",
    "researchers",
    "shares",
    "residents",
    "organizers",
    "officials",
    "preheat",
    "you",
    "yes",
    "every",
    "orders",
    "refunds",
    "he",
    "she",
    "we",
    "they",
    "most",
    "both",
    "make",
    "use",
    "please",
    "store",
}


def _lower_first(clause: str) -> str:
    first = clause.split()[0]
    return clause[:1].lower() + clause[1:] if first.lower() in LOWERABLE else clause


def word_swap(rng: random.Random, text: str) -> str:
    """Change word order while keeping the words: swap two adjacent sentences in
    a passage, swap two clauses joined by ", and"/", but", or swap two
    adjacent words in a short text."""
    sentences = re.split(r"(?<=[.?!])\s+(?=[A-Z])", text)
    if len(sentences) >= 3:
        i = rng.randrange(1, len(sentences) - 1)  # keep the opening sentence
        sentences[i], sentences[i + 1] = sentences[i + 1], sentences[i]
        return " ".join(sentences)
    for sep in (", and ", ", but "):
        if sep in text and text.count(sep) == 1:
            a, b = text.rstrip(".?!").split(sep)
            end = text[-1] if text[-1] in ".?!" else ""
            return f"{b[:1].upper() + b[1:]}{sep}{_lower_first(a)}{end}"
    toks = text.split()
    if len(toks) < 3:
        return " ".join(reversed(toks))
    cands = [
        i
        for i in range(len(toks) - 1)
        if re.fullmatch(r"[\w'-]+", toks[i])
        and re.fullmatch(r"[\w'-]+", toks[i + 1])
        and (i > 0 or len(toks) <= 6)
    ]
    if not cands:
        cands = list(range(len(toks) - 1))
    i = rng.choice(cands)
    toks[i], toks[i + 1] = toks[i + 1], toks[i]
    if i == 0 and toks[1][:1].isupper() and toks[1].lower() in LOWERABLE:
        toks[0] = toks[0][:1].upper() + toks[0][1:]
        toks[1] = toks[1].lower()
    return " ".join(toks)


TRANSFORMS = [
    ("typo", typo),
    ("casing", casing),
    ("punctuation", punctuation),
    ("word_order", word_swap),
]


# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------


def build(rng: random.Random) -> list[dict[str, str]]:
    pool = Pool()
    for a, b in PARAPHRASE_PAIRS:
        pool.add(a)
        pool.add(b)
    short = gen_short(rng, pool)
    medium = gen_medium(rng, pool)
    long_ = gen_long(rng, pool)

    # (text, cluster key) -- cluster key is later mapped to a public group id
    rows: list[tuple[str, str]] = []
    base = (
        [("short", t) for t in short]
        + [("medium", t) for t in medium]
        + [("long", t) for t in long_]
    )
    order = list(range(len(base)))
    rng.shuffle(order)

    # pick sources for transform pairs (spread over lengths) and exact duplicates
    by_kind = {"short": [], "medium": [], "long": []}
    for i in order:
        by_kind[base[i][0]].append(i)
    quota = {"short": 18, "medium": 20, "long": N_TRANSFORM_PAIRS - 38}  # 10 long
    transform_src = [i for k in ("short", "medium", "long") for i in by_kind[k][: quota[k]]]
    dup_pool = [i for i in by_kind["short"][quota["short"] :]][:6] + by_kind["medium"][
        quota["medium"] :
    ][:2]
    dup_src = dup_pool[:N_EXACT_DUP_SOURCES]

    for i, (_, text) in enumerate(base):
        rows.append((text, f"b{i}"))

    rng.shuffle(transform_src)
    transform_used: dict[str, int] = {}
    for n, i in enumerate(transform_src):
        text = base[i][1]
        name, fn = TRANSFORMS[n % len(TRANSFORMS)]
        variant = fn(rng, text)
        attempts = 0
        while (
            variant == text or norm(variant) in pool.keys and name in ("typo", "word_order")
        ) and attempts < 10:
            variant = fn(rng, text)
            attempts += 1
        if variant == text:  # fall back to a typo, which always changes the text
            name, variant = "typo", typo(rng, text)
        transform_used[name] = transform_used.get(name, 0) + 1
        rows.append((variant, f"b{i}"))

    for n, i in enumerate(dup_src):
        rows.append((base[i][1], f"b{i}"))
        if n == 0:  # one triplicate
            rows.append((base[i][1], f"b{i}"))

    for n, (a, b) in enumerate(PARAPHRASE_PAIRS):
        rows.append((a, f"p{n}"))
        rows.append((b, f"p{n}"))

    rng.shuffle(rows)
    group_ids: dict[str, str] = {}
    out = []
    for text, key in rows:
        if key not in group_ids:
            group_ids[key] = f"g{len(group_ids) + 1:04d}"
        out.append({"input": text, "group": group_ids[key]})
    return out


def pair_kind(a: str, b: str) -> str:
    """Classify a near-duplicate pair from its text alone (for the README)."""
    import difflib

    if a.lower() == b.lower():
        return "casing"

    def strip(t: str) -> str:
        return re.sub(r"\s+", " ", re.sub(r"[^\w\s']", "", t)).strip().lower()

    if strip(a) == strip(b):
        return "punctuation"
    if sorted(a.split()) == sorted(b.split()):
        return "word_order"
    if difflib.SequenceMatcher(None, a, b).ratio() >= 0.85:
        return "typo"
    return "paraphrase"


def stats(rows: list[dict[str, str]]) -> dict[str, object]:
    from collections import Counter

    groups = Counter(r["group"] for r in rows)
    by_group: dict[str, list[str]] = {}
    for r in rows:
        by_group.setdefault(r["group"], []).append(r["input"])
    near_pairs = 0
    exact_pairs = 0
    kinds: Counter[str] = Counter()
    for texts in by_group.values():
        for a in range(len(texts)):
            for b in range(a + 1, len(texts)):
                if texts[a] == texts[b]:
                    exact_pairs += 1
                else:
                    near_pairs += 1
                    kinds[pair_kind(texts[a], texts[b])] += 1
    texts = [r["input"] for r in rows]
    exact_extra = len(texts) - len(set(texts))
    lens = sorted(words(t) for t in texts)
    p90 = lens[int(0.9 * (len(lens) - 1))]
    # lower bound on BERT wordpieces: whitespace words split at punctuation, +[CLS]/[SEP]
    lb = [len(re.findall(r"\w+|[^\w\s]", t)) + 2 for t in texts]
    return {
        "rows": len(rows),
        "groups": len(groups),
        "multi_row_groups": sum(1 for c in groups.values() if c > 1),
        "singleton_groups": sum(1 for c in groups.values() if c == 1),
        "near_duplicate_pairs": near_pairs,
        "near_duplicate_pairs_by_kind": dict(sorted(kinds.items())),
        "exact_duplicate_pairs": exact_pairs,
        "exact_duplicate_extra_rows": exact_extra,
        "distinct_texts": len(set(texts)),
        "words_min": lens[0],
        "words_median": statistics.median(lens),
        "words_p90": p90,
        "words_max": lens[-1],
        "short_2_6_words": sum(1 for n in lens if 2 <= n <= 6),
        "medium_7_59_words": sum(1 for n in lens if 7 <= n <= 59),
        "long_60plus_words": sum(1 for n in lens if n >= 60),
        "over_128_wordpieces_lower_bound": sum(1 for n in lb if n > 128),
        "max_wordpieces_lower_bound": max(lb),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--stats", action="store_true", help="print counts as JSON")
    args = ap.parse_args()
    rng = random.Random(SEED)
    rows = build(rng)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if args.stats:
        print(json.dumps(stats(rows), indent=2))
    else:
        print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
