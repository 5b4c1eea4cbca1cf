"""The quality benchmark's prompts (``quality.py``): four kinds, 30 or more each, with the
constraint of each kind in every engine's syntax (one language, written out per engine).

- ``json``: few-shot extraction of a person into compact JSON (a schema-shaped regex, so
  that every engine gets exactly the same language, whitespace included);
- ``fields``: dates and e-mail addresses after a few-shot list;
- ``sql``: the shipped ``sql`` grammar (Lark; localguide and llguidance);
- ``midword``: prompts that stop inside a word: the rest of that word, then of the sentence.
"""

from __future__ import annotations

PEOPLE = [
    ("Maria", 34, "Lisbon"), ("Kenji", 51, "Osaka"), ("Aisha", 27, "Nairobi"), ("Lars", 45, "Bergen"),
    ("Sofia", 19, "Milan"), ("Omar", 62, "Cairo"), ("Chen", 38, "Shanghai"), ("Elena", 29, "Madrid"),
    ("Tomas", 56, "Prague"), ("Priya", 31, "Mumbai"), ("Jonas", 23, "Vilnius"), ("Fatima", 47, "Rabat"),
    ("Lucas", 36, "Porto"), ("Ingrid", 68, "Oslo"), ("Diego", 41, "Lima"), ("Hana", 25, "Kyoto"),
    ("Pierre", 53, "Lyon"), ("Zara", 22, "Dublin"), ("Mateo", 39, "Bogota"), ("Yuki", 44, "Sapporo"),
    ("Anna", 58, "Krakow"), ("Felix", 33, "Vienna"), ("Leila", 26, "Tehran"), ("Oscar", 49, "Malmo"),
    ("Nina", 37, "Zurich"), ("Ravi", 60, "Chennai"), ("Clara", 21, "Ghent"), ("Ivan", 54, "Kazan"),
    ("Maya", 30, "Haifa"), ("Erik", 43, "Aarhus"),
]
_SENTENCES = ["{n} is {a} years old and lives in {c}.", "Meet {n}, {a}, from {c}.",
              "{n} ({a}) moved to {c} last year.", "Born {a} years ago, {n} now works in {c}."]
_JSON_SHOTS = ('Text: Paul is 40 years old and lives in Rome.\nJSON: {"name":"Paul","age":40,"city":"Rome"}\n'
               'Text: Meet Sara, 28, from Berlin.\nJSON: {"name":"Sara","age":28,"city":"Berlin"}\n')
JSON_REGEX = r' ?\{"name":"[A-Za-z]{1,12}","age":[0-9]{1,3},"city":"[A-Za-z ]{1,16}"\}'
JSON_GBNF = ('root ::= " "? "{\\"name\\":\\"" [A-Za-z]{1,12} "\\",\\"age\\":" [0-9]{1,3} '
             '",\\"city\\":\\"" [A-Za-z ]{1,16} "\\"}"')

DATE_REGEX = r" ?[0-9]{4}-[0-9]{2}-[0-9]{2}"
DATE_GBNF = 'root ::= " "? [0-9]{4} "-" [0-9]{2} "-" [0-9]{2}'
EMAIL_REGEX = r" ?[a-z0-9._]{1,20}@[a-z0-9]{1,16}\.[a-z]{2,3}"
EMAIL_GBNF = 'root ::= " "? [a-z0-9._]{1,20} "@" [a-z0-9]{1,16} "." [a-z]{2,3}'
_EVENTS = ["the first Moon landing", "the fall of the Berlin Wall", "the signing of the US Declaration of Independence",
           "the start of World War I", "the end of World War II in Europe", "the launch of Sputnik 1",
           "the first flight of the Wright brothers", "the sinking of the Titanic", "the storming of the Bastille",
           "the release of the first iPhone", "the euro coins entering circulation", "the Chernobyl disaster",
           "Nelson Mandela's release from prison", "the founding of the United Nations",
           "the first FIFA World Cup final"]
_NAMES = ["alice smith", "bob jones", "carol white", "dan brown", "eve black", "frank green", "grace lee",
          "henry ford", "iris king", "jack hill", "kate moss", "liam young", "mia wong", "noah scott",
          "olga petrova"]

SQL_QUESTIONS = [
    "all users older than 30", "the names of all products that cost more than 10", "the number of orders per customer",
    "the five most recent orders", "every employee in the sales department", "the average salary by department",
    "customers from Paris", "products that are out of stock", "orders placed in 2023", "the highest price of any product",
    "users whose name starts with A", "the total revenue per month", "the ten best selling products",
    "employees hired after 2020", "the cities with more than 100 customers", "orders with no shipping date",
    "the email addresses of all users", "the cheapest product in each category", "the customers who never ordered",
    "the count of users", "all books by Tolkien", "movies released before 1990", "students with a grade above 90",
    "the distinct countries of our customers", "invoices over 1000 dollars", "flights from London to Paris",
    "the oldest employee", "the number of products per category", "tasks that are not done",
    "the names and ages of all pets",
]
_SQL_SHOTS = ("-- SQL for: all columns of the table users\nSELECT * FROM users;\n"
              "-- SQL for: the names of customers in Rome\nSELECT name FROM customers WHERE city = 'Rome';\n")

# The rest of the word (a mid-word prompt's continuation starts inside it), then the sentence.
MIDWORD_REGEX = r"[a-z][^\n.]*\."
MIDWORD_GBNF = 'root ::= [a-z] [^\\n.]* "."'
MIDWORD = [
    "The capital of Fran", "My favourite programming language is Pyt", "She opened the windo",
    "The quick brown fox jumps over the la", "In the morning I usually drink cof", "The Eiffel Tower is in Pa",
    "Water boils at one hundred degrees Cel", "The largest planet in our solar system is Jup",
    "He played the gui", "The cat sat on the ma", "We went to the beach in the sum", "Shakespeare wrote Ham",
    "The Amazon is the largest rainfo", "My brother works as a doc", "The train leaves from platform thr",
    "Photosynthesis happens in the chlorop", "The opposite of hot is co", "Bees make hon",
    "The first man on the moon was Neil Arms", "Tomatoes are technically a fru", "The Great Wall is in Chi",
    "I need to buy some groc", "The heart pumps blo", "A triangle has three si", "Ice is frozen wat",
    "The library closes at eight o'clo", "Mount Everest is the highest mount", "She speaks fluent Span",
    "The sun rises in the ea", "Our teacher gave us a lot of homew", "The Pacific is the largest oce",
    "Penguins live in Antarc",
]


def prompts() -> dict[str, list[tuple[str, dict]]]:
    """Per kind, (prompt, {engine syntax: constraint}) pairs."""
    out: dict[str, list] = {"json": [], "fields": [], "sql": [], "midword": []}
    for i, (n, a, c) in enumerate(PEOPLE):
        text = _SENTENCES[i % len(_SENTENCES)].format(n=n, a=a, c=c)
        out["json"].append((f"{_JSON_SHOTS}Text: {text}\nJSON:", {"regex": JSON_REGEX, "gbnf": JSON_GBNF}))
    date_shots = "Event: the first Olympic marathon\nDate: 1896-04-10\n"
    for event in _EVENTS:
        out["fields"].append((f"{date_shots}Event: {event}\nDate:", {"regex": DATE_REGEX, "gbnf": DATE_GBNF}))
    mail_shots = "Name: john doe\nE-mail: john.doe@example.com\n"
    for name in _NAMES:
        out["fields"].append((f"{mail_shots}Name: {name}\nE-mail:", {"regex": EMAIL_REGEX, "gbnf": EMAIL_GBNF}))
    for q in SQL_QUESTIONS:
        out["sql"].append((f"{_SQL_SHOTS}-- SQL for: {q}\n", {"grammar": "sql"}))
    for p in MIDWORD:
        out["midword"].append((p, {"regex": MIDWORD_REGEX, "gbnf": MIDWORD_GBNF}))
    return out
