"""The tagql TAG dev set: 40 questions in TAG-Bench format on the available BIRD databases, each answered
by a hand-written reference pipeline (plain SQL + hand labels below; nothing here uses tagql or an LM).

    python -m bench.tag.devset            # recompute every answer and write bench/tag/data/tag_dev.csv

How answers were labelled: every question has a reference function below. Knowledge the database does
not hold (which US states border Canada, which elements are halogens, who founded which publisher, state
populations, electronegativity, ...) is written down by hand as a Python constant, from standard reference
facts, chosen so the answer is not disputed (ambiguous questions were dropped while writing the set). The
function combines those constants with exact SQL over the real database, like the paper's LOTUS pipelines
combine pandas with sem_filter; the CSV holds its output. Reasoning questions label text properties
(a food or drink purchase, a language major, calendar order of month names, name length) the same way.

Answer formats (as TAG-Bench): match / comparison / ranking answers are Python lists (ranking: order
matters); aggregation answers are the key facts a correct summary must mention (scored by containment).
"""

from __future__ import annotations

import csv
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from bench import common

BIRD = common.DATA / "bird" / "dev_databases"
OUT = common.BENCH / "tag" / "data" / "tag_dev.csv"


def db_path(name: str) -> Path:
    return BIRD / name / f"{name}.sqlite"


def q(db: str, sql: str, *params: object) -> list[tuple]:
    con = sqlite3.connect(f"file:{db_path(db)}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


# ---- hand labels (world knowledge) -------------------------------------------------------------------------
BORDER_CANADA = {"Alaska", "Washington", "Idaho", "Montana", "North Dakota", "Minnesota", "Michigan", "New York",
                 "Vermont", "New Hampshire", "Maine", "Ohio", "Pennsylvania"}
NEW_ENGLAND = {"Maine", "New Hampshire", "Vermont", "Massachusetts", "Rhode Island", "Connecticut"}
ATLANTIC_COAST = {"Maine", "New Hampshire", "Massachusetts", "Rhode Island", "Connecticut", "New York", "New Jersey",
                  "Delaware", "Maryland", "Virginia", "North Carolina", "South Carolina", "Georgia", "Florida",
                  "Pennsylvania"}
MIDWEST = {"Ohio", "Indiana", "Illinois", "Michigan", "Wisconsin", "Minnesota", "Iowa", "Missouri", "North Dakota",
           "South Dakota", "Nebraska", "Kansas"}
WEST = {"Washington", "Oregon", "California", "Nevada", "Idaho", "Montana", "Wyoming", "Utah", "Colorado", "Arizona",
        "New Mexico", "Alaska", "Hawaii"}
PACIFIC_COAST = {"Washington", "Oregon", "California", "Alaska", "Hawaii"}
STATE_POP_2020_M = {"California": 39.5, "Texas": 29.1, "New York": 20.2, "Illinois": 12.8, "Michigan": 10.1,
                    "North Carolina": 10.4, "New Jersey": 9.3, "Virginia": 8.6, "Washington": 7.7,
                    "Massachusetts": 7.0, "Indiana": 6.8, "Tennessee": 6.9, "Maryland": 6.2, "Minnesota": 5.7,
                    "South Carolina": 5.1, "Alabama": 5.0, "Utah": 3.3, "North Dakota": 0.8}
STATE_CENTROID_LON = {"Washington": -120.5, "California": -119.4, "Utah": -111.7, "North Dakota": -100.5,
                      "Texas": -99.3, "Minnesota": -94.3, "Illinois": -89.2, "Alabama": -86.8, "Tennessee": -86.3,
                      "Indiana": -86.3, "Michigan": -84.7, "South Carolina": -80.9, "North Carolina": -79.4,
                      "Virginia": -78.8, "Maryland": -76.8, "New York": -75.5, "New Jersey": -74.7,
                      "Massachusetts": -71.8}
HALOGENS = {"f", "cl", "br", "i", "at"}
ALKALI = {"li", "na", "k", "rb", "cs", "fr"}
TRANSITION = {"cu", "zn", "y", "fe", "ni", "co", "mn", "cr", "ti", "v", "sc", "ag", "au", "pt", "hg", "cd", "pd"}
METALLOIDS = {"b", "si", "ge", "as", "sb", "te"}
ELECTRONEGATIVITY = {"f": 3.98, "o": 3.44, "n": 3.04, "c": 2.55}
PERSON_PUBLISHERS = {"George Lucas", "J. K. Rowling", "J. R. R. Tolkien"}  # the others are companies/brands
PUBLISHER_FOUNDED = {"DC Comics": 1934, "Marvel Comics": 1939, "Dark Horse Comics": 1986, "Image Comics": 1992}
BOND_STRENGTH = {"-": 1, "=": 2, "#": 3}
# ---- hand labels (reasoning over text) ---------------------------------------------------------------------
FOOD_OR_DRINK = {"Bakery - Donuts, muffins", "Pizza", "Water, Cookies", "Water, Veggie tray, supplies",
                 "Water, chips, cookies", "Water, cookies, chips"}
ADVERTISING = {"Posters", "Post Cards, Posters"}
LANGUAGE_MAJORS = {"Spanish", "Portuguese", "Chinese", "German", "French"}
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


def members_by_state() -> list[tuple[str, str]]:
    return q("student_club", "SELECT m.first_name || ' ' || m.last_name, z.state FROM member m "
                              "JOIN zip_code z ON m.zip = z.zip_code ORDER BY m.last_name, m.first_name")


def member_states() -> list[str]:
    return sorted({s for _, s in members_by_state()})


def more_atoms(a: set[str], a_label: str, b: set[str], b_label: str) -> str:
    """Which of two element groups has more atoms in the atom table (ties go to ``b``)."""
    ec = element_counts()
    count_a = sum(v for e, v in ec.items() if e in a)
    count_b = sum(v for e, v in ec.items() if e in b)
    return a_label if count_a > count_b else b_label


def element_counts() -> dict[str, int]:
    return dict(q("toxicology", "SELECT element, COUNT(*) FROM atom GROUP BY element"))


def month_order(names: list[str]) -> list[str]:
    return sorted(names, key=lambda n: next(i for i, m in enumerate(MONTHS) if m in n))


# ---- the questions -------------------------------------------------------------------------------------------
Ref = Callable[[], object]
QUESTIONS: list[tuple[str, str, str, str, Ref]] = []  # (db, question, type, kind, reference)


def registrar(questions: list) -> Callable[[str, str, str, str], Callable[[Ref], Ref]]:
    """``@add(db, question, type, kind)`` for a question set: the decorated reference function joins
    ``questions`` (shared with bench/tag/heldout.py)."""
    def add(db: str, question: str, qtype: str, kind: str) -> Callable[[Ref], Ref]:
        def deco(fn: Ref) -> Ref:
            questions.append((db, question, qtype, kind, fn))
            return fn
        return deco
    return add


add = registrar(QUESTIONS)


# Match ------------------------------------------------------------------------------------------------------
@add("student_club", "Which club members live in a US state that borders Canada? List their full names.",
     "Match", "Knowledge")
def m1():
    return sorted(n for n, s in members_by_state() if s in BORDER_CANADA)


@add("student_club", "How many club members live in a New England state?", "Match", "Knowledge")
def m2():
    return [sum(s in NEW_ENGLAND for _, s in members_by_state())]


@add("toxicology", "How many molecules contain at least one halogen atom?", "Match", "Knowledge")
def m3():
    ids = {m for m, e in q("toxicology", "SELECT molecule_id, element FROM atom") if e in HALOGENS}
    return [len(ids)]


@add("toxicology", "Which elements in the atom table are alkali metals?", "Match", "Knowledge")
def m4():
    return sorted(e for e in element_counts() if e in ALKALI)


@add("superhero", "Which publishers are named after an individual person rather than a company?", "Match",
     "Knowledge")
def m5():
    return sorted(p for (p,) in q("superhero", "SELECT publisher_name FROM publisher") if p in PERSON_PUBLISHERS)


@add("student_club", "How many expense records were spent on food or drinks?", "Match", "Reasoning")
def m6():
    return [sum(d in FOOD_OR_DRINK for (d,) in q("student_club", "SELECT expense_description FROM expense"))]


@add("superhero", "How many superheroes have a two-tone eye colour (two colours written with a slash)?", "Match",
     "Reasoning")
def m7():
    rows = q("superhero", "SELECT c.colour FROM superhero s JOIN colour c ON s.eye_colour_id = c.id")
    return [sum("/" in c for (c,) in rows)]


@add("student_club", "Which majors teach a foreign language?", "Match", "Reasoning")
def m8():
    return sorted(m for (m,) in q("student_club", "SELECT major_name FROM major") if m in LANGUAGE_MAJORS)


@add("toxicology", "How many double bonds does molecule TR006 have?", "Match", "Reasoning")
def m9():
    return [sum(t == "=" for (t,) in q("toxicology", "SELECT bond_type FROM bond WHERE molecule_id = 'TR006'"))]


@add("superhero", "Which superheroes of the race 'Cyborg' have a superhero name of two or more words?", "Match",
     "Reasoning")
def m10():
    rows = q("superhero", "SELECT s.superhero_name FROM superhero s JOIN race r ON s.race_id = r.id "
                          "WHERE r.race = 'Cyborg'")
    return sorted(n for (n,) in rows if len(n.split()) >= 2)


# Comparison -------------------------------------------------------------------------------------------------
@add("student_club", "Do more club members live in Atlantic coast states or in other states? Answer "
     "'Atlantic coast' or 'other'.", "Comparison", "Knowledge")
def c1():
    states = [s for _, s in members_by_state()]
    east = sum(s in ATLANTIC_COAST for s in states)
    return ["Atlantic coast" if east > len(states) - east else "other"]


@add("toxicology", "Are there more halogen atoms or alkali metal atoms in the atom table? Answer 'halogen' or "
     "'alkali metal'.", "Comparison", "Knowledge")
def c2():
    return [more_atoms(HALOGENS, "halogen", ALKALI, "alkali metal")]


@add("toxicology", "Are there more atoms of transition metals or of metalloids in the atom table? Answer "
     "'transition metals' or 'metalloids'.", "Comparison", "Knowledge")
def c3():
    return [more_atoms(TRANSITION, "transition metals", METALLOIDS, "metalloids")]


@add("superhero", "Which publisher has more superheroes: the creator of Star Wars or the author of Harry Potter? "
     "Give the publisher name.", "Comparison", "Knowledge")
def c4():
    rows = dict(q("superhero", "SELECT p.publisher_name, COUNT(*) FROM superhero s JOIN publisher p "
                               "ON s.publisher_id = p.id GROUP BY p.publisher_name"))
    a, b = "George Lucas", "J. K. Rowling"
    return [a if rows.get(a, 0) > rows.get(b, 0) else b]


@add("student_club", "Do more club members live in Midwestern states or in Western states? Answer 'Midwest' or "
     "'West'.", "Comparison", "Knowledge")
def c5():
    states = [s for _, s in members_by_state()]
    return ["Midwest" if sum(s in MIDWEST for s in states) > sum(s in WEST for s in states) else "West"]


@add("student_club", "Was more money spent in total on food and drinks or on posters and postcards? Answer "
     "'food and drinks' or 'posters and postcards'.", "Comparison", "Reasoning")
def c6():
    rows = q("student_club", "SELECT expense_description, cost FROM expense")
    food = sum(c for d, c in rows if d in FOOD_OR_DRINK)
    adv = sum(c for d, c in rows if d in ADVERTISING)
    return ["food and drinks" if food > adv else "posters and postcards"]


@add("superhero", "Do more superheroes have a one-word superhero name or a name of several words? Answer "
     "'one word' or 'several words'.", "Comparison", "Reasoning")
def c7():
    names = [n for (n,) in q("superhero", "SELECT superhero_name FROM superhero WHERE superhero_name IS NOT NULL")]
    one = sum(len(n.split()) == 1 for n in names)
    return ["one word" if one > len(names) - one else "several words"]


@add("student_club", "Which event was more expensive in total: the one held in the first month of the autumn "
     "term or the one held in the month of Halloween, among the 'Speaker' events? Give the event name.",
     "Comparison", "Reasoning")
def c8():
    rows = dict(q("student_club", "SELECT e.event_name, SUM(x.cost) FROM expense x JOIN budget b "
                                  "ON x.link_to_budget = b.budget_id JOIN event e ON b.link_to_event = e.event_id "
                                  "WHERE e.event_name IN ('September Speaker', 'October Speaker') "
                                  "GROUP BY e.event_name"))
    return [max(rows, key=rows.get)]


@add("toxicology", "In molecule TR001, are there more single bonds or double bonds? Answer 'single' or 'double'.",
     "Comparison", "Reasoning")
def c9():
    types = [t for (t,) in q("toxicology", "SELECT bond_type FROM bond WHERE molecule_id = 'TR001'")]
    return ["single" if types.count("-") > types.count("=") else "double"]


@add("superhero", "Which is heavier: the heaviest superhero whose name is a giant monster from Japanese films, or "
     "King Kong? Give the superhero name.", "Comparison", "Reasoning")
def c10():
    rows = dict(q("superhero", "SELECT superhero_name, weight_kg FROM superhero WHERE superhero_name IN "
                               "('Godzilla', 'King Kong')"))
    return [max(rows, key=rows.get)]


# Ranking ----------------------------------------------------------------------------------------------------
@add("toxicology", "List the halogen elements in the atom table from most to least frequent.", "Ranking",
     "Knowledge")
def r1():
    ec = element_counts()
    return sorted((e for e in ec if e in HALOGENS), key=lambda e: -ec[e])


@add("student_club", "Among the states where club members live, list the three most populous, largest first.",
     "Ranking", "Knowledge")
def r2():
    return sorted(member_states(), key=lambda s: -STATE_POP_2020_M[s])[:3]


@add("superhero", "List the publishers DC Comics, Marvel Comics, Dark Horse Comics and Image Comics from oldest "
     "to newest by founding year.", "Ranking", "Knowledge")
def r3():
    names = [p for (p,) in q("superhero", "SELECT publisher_name FROM publisher") if p in PUBLISHER_FOUNDED]
    return sorted(names, key=PUBLISHER_FOUNDED.get)


@add("student_club", "Among the states where club members live, list the three westernmost, most western first.",
     "Ranking", "Knowledge")
def r4():
    return sorted(member_states(), key=lambda s: STATE_CENTROID_LON[s])[:3]


@add("toxicology", "Rank the elements c, n, o and f by electronegativity, highest first.", "Ranking", "Knowledge")
def r5():
    return sorted((e for e in element_counts() if e in ELECTRONEGATIVITY), key=lambda e: -ELECTRONEGATIVITY[e])


@add("student_club", "List the officers meetings in calendar-month order, January first.", "Ranking",
     "Reasoning")
def r6():
    return month_order([n for (n,) in q("student_club", "SELECT event_name FROM event WHERE event_name "
                                                        "LIKE 'Officers meeting%'")])


@add("student_club", "List the 'Speaker' events in calendar-month order, January first.", "Ranking", "Reasoning")
def r7():
    return month_order([n for (n,) in q("student_club", "SELECT event_name FROM event WHERE event_name "
                                                        "LIKE '% Speaker'")])


@add("superhero", "Of the 5 heaviest superheroes, list their superhero names from shortest to longest name.",
     "Ranking", "Reasoning")
def r8():
    names = [n for (n,) in q("superhero", "SELECT superhero_name FROM superhero ORDER BY weight_kg DESC LIMIT 5")]
    return sorted(names, key=len)


@add("student_club", "List the monthly club meetings named '<Month> Meeting' in calendar-month order, January "
     "first.", "Ranking", "Reasoning")
def r9():
    rows = q("student_club", "SELECT event_name FROM event WHERE event_name LIKE '% Meeting' "
                             "AND event_name NOT LIKE 'Officers%'")
    return month_order([n for (n,) in rows if n.split()[0] in MONTHS])


@add("superhero", "Of the 5 lightest superheroes with a known weight above 0, list their superhero names from "
     "shortest to longest name.", "Ranking", "Reasoning")
def r10():
    names = [n for (n,) in q("superhero", "SELECT superhero_name FROM superhero WHERE weight_kg > 0 "
                                          "ORDER BY weight_kg ASC LIMIT 5")]
    return sorted(names, key=len)


# Aggregation (answer = key facts a correct summary mentions) -----------------------------------------------
@add("student_club", "Summarize the club members who live in a state on the Pacific coast.", "Aggregation",
     "Knowledge")
def a1():
    return sorted(n for n, s in members_by_state() if s in PACIFIC_COAST)


@add("superhero", "Provide information about the superheroes published by the creator of Star Wars, including how "
     "many there are.", "Aggregation", "Knowledge")
def a2():
    rows = q("superhero", "SELECT COUNT(*) FROM superhero s JOIN publisher p ON s.publisher_id = p.id "
                          "WHERE p.publisher_name = 'George Lucas'")
    return [rows[0][0]]


@add("student_club", "Provide information about the club members living in the state whose capital is Albany.",
     "Aggregation", "Knowledge")
def a3():
    return sorted(n for n, s in members_by_state() if s == "New York")


@add("superhero", "Summarize the superheroes published by the author of Harry Potter.", "Aggregation", "Knowledge")
def a4():
    return [n for (n,) in q("superhero", "SELECT s.superhero_name FROM superhero s JOIN publisher p "
                                         "ON s.publisher_id = p.id WHERE p.publisher_name = 'J. K. Rowling'")]


@add("toxicology", "Summarize which halogen elements occur in molecule TR001 and how many atoms of each.",
     "Aggregation", "Knowledge")
def a5():
    rows = q("toxicology", "SELECT element, COUNT(*) FROM atom WHERE molecule_id = 'TR001' GROUP BY element")
    return sorted(e for e, _ in rows if e in HALOGENS)


@add("student_club", "Summarize the expenses of the event 'Yearly Kickoff'.", "Aggregation", "Reasoning")
def a6():
    rows = q("student_club", "SELECT x.expense_description FROM expense x JOIN budget b ON x.link_to_budget = "
                             "b.budget_id JOIN event e ON b.link_to_event = e.event_id WHERE e.event_name = "
                             "'Yearly Kickoff'")
    return sorted({d for (d,) in rows})


@add("superhero", "Summarize the attributes of Batman and their values.", "Aggregation", "Reasoning")
def a7():
    rows = q("superhero", "SELECT a.attribute_name FROM hero_attribute h JOIN attribute a ON h.attribute_id = a.id "
                          "JOIN superhero s ON h.hero_id = s.id WHERE s.superhero_name = 'Batman'")
    return sorted({a for (a,) in rows})


@add("toxicology", "Describe the atoms of molecule TR000: which elements occur and how often.", "Aggregation",
     "Reasoning")
def a8():
    return sorted(e for (e,) in q("toxicology", "SELECT DISTINCT element FROM atom WHERE molecule_id = 'TR000'"))


@add("student_club", "Summarize the expenses of the event 'October Speaker'.", "Aggregation", "Reasoning")
def a9():
    rows = q("student_club", "SELECT x.expense_description FROM expense x JOIN budget b ON x.link_to_budget = "
                             "b.budget_id JOIN event e ON b.link_to_event = e.event_id WHERE e.event_name = "
                             "'October Speaker'")
    return sorted({d for (d,) in rows})


@add("superhero", "Summarize the superpowers of Aquaman.", "Aggregation", "Reasoning")
def a10():
    rows = q("superhero", "SELECT p.power_name FROM hero_power h JOIN superpower p ON h.power_id = p.id "
                          "JOIN superhero s ON h.hero_id = s.id WHERE s.superhero_name = 'Aquaman' "
                          "ORDER BY p.power_name")
    powers = [p for (p,) in rows]
    return [p for p in powers if p in ("Underwater breathing", "Sub-Mariner", "Super Strength", "Water Control")] \
        or powers[:3]


def build(questions: list | None = None) -> list[dict[str, str]]:
    """Every question's row, its answer computed by its reference function (``questions`` default: this set)."""
    out = []
    for i, (db, question, qtype, kind, fn) in enumerate(QUESTIONS if questions is None else questions):
        answer = fn()
        out.append({"Query ID": str(i), "DB used": db, "Query": question, "Query type": qtype,
                    "Knowledge/Reasoning Type": kind, "Answer": json.dumps(answer, ensure_ascii=False),
                    "Reference": fn.__name__})
    return out


def write(rows: list[dict[str, str]], out: Path) -> None:
    """The question set as TAG-Bench's CSV, and a per-(type, kind) count and each answer on stdout."""
    from collections import Counter

    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(Counter((r["Query type"], r["Knowledge/Reasoning Type"]) for r in rows))
    for r in rows:
        print(f"{r['Query ID']:>2} {r['DB used']:<12} {r['Query type'][:5]} {r['Knowledge/Reasoning Type'][:4]} "
              f"{r['Query']}\n   -> {r['Answer'][:200]}")
    print(f"wrote {out}")


def main() -> int:
    write(build(), OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
