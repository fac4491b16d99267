"""LM_NUMBER reply styles side by side: how well the numbers the local model gives order real things.

`ORDER BY LM_NUMBER('the population of the state {state}', state)` ranks by a fact the database does not
store, so what matters is the order the numbers put the items in. Two reply styles of
`SemEngine.number_many`, same prompt otherwise:

* `plain`  - a bare JSON number (the style up to session 16);
* `scaled` - `{"value": ..., "scale": "units"|"thousand"|"million"|"billion"}` (the default since session 17).

and two record forms, what the model reads for each row: `filled` - the instruction with the value in
it ("the population of the state California", what `LM_NUMBER` in SQL sends), `field` - the row as
`state: California` (the instruction is in the system prompt either way). Session 17: scaled/filled has
the best mean (0.60, field 0.56), so the record form stayed `filled`; field won the state populations.

Each set pairs items with hand-labelled true values (public reference figures, listed below; none is a
TAG dev question's answer list) and is scored by Spearman's rank correlation of the model's numbers
with the true ones (an item without a number ranks last) and by whether the top 3 match as a set.

    python -m bench.tag.lm_numbers [--styles plain,scaled] [--records filled,field] [--out ...]

Prints a table and writes JSON. Fresh operator cache: every number is asked.
"""

from __future__ import annotations

import argparse
import sys
import time

from scipy.stats import spearmanr

from bench import common
from tagql.config import load_settings
from tagql.llm import make_llm
from tagql.tag.cache import OpCache
from tagql.tag.operators import SemEngine

# (instruction, field, {item: true value}); true values: 2020 US census (millions of people), Pauling
# electronegativity, founding years of the publishers, longitudes of city centres (degrees east), the
# calendar month named in an event name, areas of countries (thousand km2), release years of films.
SETS: list[tuple[str, str, dict[str, float]]] = [
    ("the population of the state {state}", "state", {
        "California": 39.54, "Texas": 29.15, "Florida": 21.54, "New York": 20.20, "Illinois": 12.81,
        "Ohio": 11.80, "Georgia": 10.71, "Virginia": 8.63, "Washington": 7.71, "Tennessee": 6.91,
        "Maryland": 6.18, "Oregon": 4.24, "Utah": 3.27, "Vermont": 0.643, "Wyoming": 0.577}),
    ("the population of the city {city}", "city", {
        "New York City": 8.80, "Los Angeles": 3.90, "Chicago": 2.75, "Houston": 2.30, "Phoenix": 1.61,
        "San Francisco": 0.874, "Seattle": 0.737, "Boston": 0.676, "Denver": 0.716, "Miami": 0.442,
        "Reno": 0.264, "Burlington": 0.045}),
    ("the area of the country {country}", "country", {
        "Russia": 17098, "Canada": 9985, "China": 9597, "Brazil": 8516, "India": 3287, "France": 644,
        "Germany": 357, "Italy": 301, "Portugal": 92, "Belgium": 31, "Luxembourg": 2.6, "Malta": 0.316}),
    ("the founding year of {publisher_name}", "publisher_name", {
        "DC Comics": 1934, "Marvel Comics": 1939, "Dark Horse Comics": 1986, "Image Comics": 1992,
        "IDW Publishing": 1999, "Dynamite Entertainment": 2004}),
    ("the electronegativity of the chemical element {element}", "element", {
        "fluorine": 3.98, "oxygen": 3.44, "chlorine": 3.16, "nitrogen": 3.04, "bromine": 2.96, "iodine": 2.66,
        "sulfur": 2.58, "carbon": 2.55, "hydrogen": 2.20, "phosphorus": 2.19, "sodium": 0.93,
        "potassium": 0.82}),
    ("the longitude in degrees of the city {city}", "city", {
        "Seattle": -122.33, "San Francisco": -122.42, "Los Angeles": -118.24, "Phoenix": -112.07,
        "Denver": -104.99, "Dallas": -96.80, "Chicago": -87.63, "Atlanta": -84.39, "Miami": -80.19,
        "New York City": -74.01, "Boston": -71.06}),
    ("the month number (1-12, January = 1) of the month named in {event_name}", "event_name", {
        "January Social": 1, "February Social": 2, "March Social": 3, "April Social": 4, "May Social": 5,
        "June Social": 6, "July Social": 7, "August Social": 8, "September Social": 9, "October Social": 10,
        "November Social": 11, "December Social": 12}),
    ("the release year of the film {title}", "title", {
        "Casablanca": 1942, "Psycho": 1960, "The Godfather": 1972, "Star Wars": 1977, "Titanic": 1997,
        "The Matrix": 1999, "Avatar": 2009, "Inception": 2010, "Frozen": 2013, "Oppenheimer": 2023}),
]


def score(numbers: list[float | None], truth: list[float]) -> tuple[float, bool]:
    low = min((n for n in numbers if n is not None), default=0.0) - 1.0
    filled = [n if n is not None else low for n in numbers]
    rho = float(spearmanr(filled, truth).statistic) if len(set(filled)) > 1 else 0.0
    top = {i for i, _ in sorted(enumerate(filled), key=lambda p: -p[1])[:3]}
    true_top = {i for i, _ in sorted(enumerate(truth), key=lambda p: -p[1])[:3]}
    return rho, top == true_top


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--styles", default="plain,scaled")
    ap.add_argument("--records", default="filled,field")
    ap.add_argument("--out", default=str(common.result_path("tag", "lm_numbers")))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)
    llm = make_llm(load_settings())
    variants = [(st, rec) for st in args.styles.split(",") for rec in args.records.split(",")]
    names = [f"{st}/{rec}" for st, rec in variants]
    records = []
    for instruction, field, facts in SETS:
        for (style, rec), name in zip(variants, names, strict=True):
            items = [instruction.replace("{" + field + "}", k) if rec == "filled" else f"{field}: {k}" for k in facts]
            engine = SemEngine(llm, cache=OpCache(None), max_calls=10_000)
            t0 = time.perf_counter()
            numbers = engine.number_many(instruction, items, style=style)
            rho, top3 = score(numbers, list(facts.values()))
            records.append({"instruction": instruction, "variant": name, "spearman": round(rho, 3), "top3": top3,
                            "seconds": round(time.perf_counter() - t0, 1),
                            "numbers": dict(zip(facts, numbers, strict=True))})
            print(f"  {name:14s} rho {rho:+.2f} top3 {'yes' if top3 else 'no ':3s} {instruction}", file=sys.stderr)
    print(f"\n{'set':50s} " + " ".join(f"{n:>14s}" for n in names))
    for instruction, _f, _facts in SETS:
        cells = []
        for n in names:
            r = next(r for r in records if r["instruction"] == instruction and r["variant"] == n)
            cells.append(f"{r['spearman']:+.2f} {'top3' if r['top3'] else '    '}")
        print(f"{instruction[:50]:50s} " + " ".join(f"{c:>14s}" for c in cells))
    summary = {n: {"mean_spearman": round(sum(r["spearman"] for r in records if r["variant"] == n) / len(SETS), 3),
                   "top3_sets": sum(r["top3"] for r in records if r["variant"] == n)} for n in names}
    print(f"{'mean Spearman, top-3 sets right (of ' + str(len(SETS)) + ')':50s} "
          + " ".join(f"{summary[n]['mean_spearman']:+.2f} {summary[n]['top3_sets']:>4d}    " for n in names))
    run.save(args.out, {"model": getattr(llm, "name", "llm"), "summary": summary, "records": records})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
