"""Honest abstention: precision and recall on unanswerable questions, EX on answerable ones with and without it.

The unanswerable set (`bench/ask/data/unanswerable.json`: questions over student_club, superhero, toxicology
and the demo database that the database cannot answer, five kinds, split once train/dev/test stratified by kind
and database, seed 36) is mixed with ALL 432 answerable BIRD questions of the three databases, each in its part
of the fixed BIRD split (`bench/ask/data/bird_ask_split.json`: train 215, dev 107, test 110). Per question the
signals of `tagql.text2sql.abstain` are read (the uncovered content words, free, with the vocabulary built from
the database's value index as the pipeline does; the local model's P(yes) where `--signals` recorded it), the
thresholds are fitted on train only (the highest recall at precision >= 0.90, then the fewest false
abstentions), dev checks them and test is reported beside it. Each split is scored twice: without evidence
(condition `none`) and with the BIRD evidence passed as a domain statement (`evidence`, as the pipeline passes
retrieved statements). The gate runs before any SQL, so EX with abstention is EX without it minus the correct
answers refused: per-question correctness is read from a `bench.ask.bird` run's records of the same condition
(`--bird`; default bench/results/ask/bird.json, the recorded live run over all 432 questions, both conditions).

    python -m bench.ask.abstention --split-check                 # the committed split is the seed-36 split
    python -m bench.ask.abstention                               # coverage rule: fit on train, report all splits
    python -m bench.ask.abstention --signals                     # real model: the yes/no per question (resumable)

Prints a table and writes bench/results/ask/abstention.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench import common

DATA = common.DATA
HERE = Path(__file__).resolve().parent / "data"
SET = HERE / "unanswerable.json"
DBS = ["student_club", "superhero", "toxicology"]
SEED = 36
PATTERN = ["train", "dev", "test", "train", "dev", "test", "train", "train", "dev", "test"]  # 40/30/30


def assign_splits(questions: list[dict], seed: int = SEED) -> list[dict]:
    """Each (kind, database) group shuffled with ``seed``, its members dealt in turn along :data:`PATTERN`
    (the pattern carries on from one group to the next): stratified ~40/30/30."""
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for q in questions:
        groups[(q["kind"], q["database"])].append(q)
    out, i = [], 0
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda q: q["question"])
        rng.shuffle(members)
        for q in members:
            out.append({**q, "split": PATTERN[i % len(PATTERN)]})
            i += 1
    order = {q["question"]: n for n, q in enumerate(questions)}
    return sorted(out, key=lambda q: order[q["question"]])


def load_set() -> list[dict]:
    return json.loads(SET.read_text())["questions"]


def database_path(name: str) -> Path:
    if name == "demo":
        from tagql.demo import demo_database_path

        return demo_database_path()
    return DATA / "bird" / "dev_databases" / name / f"{name}.sqlite"


TRAIN_ANSWERABLE = 60  # BIRD train questions in the mix (seeded subset; dev and test: all)
VARIANTS = ("answerable", "answerable_missing")  # the yes/no prompts compared (prompts.toml)


def answerable_questions(sample_train: bool = True) -> list[dict]:
    """The BIRD questions of the three databases (with their evidence): all of dev and test, and all of
    train, or (``sample_train``: the model's yes/no was measured on these) a seed-36 sample of
    :data:`TRAIN_ANSWERABLE` train questions."""
    from bench.ask.bird_split import load_split

    part_of = load_split()
    bird = json.loads((DATA / "bird" / "dev.json").read_text())
    qs = [{"database": q["db_id"], "question": q["question"], "question_id": q["question_id"],
           "evidence": q.get("evidence", ""), "split": part_of[q["question_id"]], "kind": "answerable"}
          for q in bird if q["db_id"] in DBS]
    if not sample_train:
        return qs
    train = [q for q in qs if q["split"] == "train"]
    keep = {q["question_id"] for q in random.Random(SEED).sample(train, TRAIN_ANSWERABLE)}
    return [q for q in qs if q["split"] != "train" or q["question_id"] in keep]


def key(q: dict) -> str:
    return f"{q['database']}|{q['question']}"


def signals(out_jsonl: Path, limit_s: float) -> None:
    """The two signals of every question (unanswerable and answerable), appended to ``out_jsonl``; questions
    already there are skipped, and it stops after ``limit_s`` seconds (run it again to go on)."""
    from tagql.config import load_settings
    from tagql.db import open_database
    from tagql.llm import make_llm
    from tagql.text2sql.abstain import answerable_probability, database_vocabulary, uncovered_terms
    from tagql.text2sql.query import QuerySynthesizer

    done = set()
    if out_jsonl.exists():
        done = {json.loads(line)["key"] for line in out_jsonl.read_text().splitlines() if line.strip()}
    todo = [q for q in load_set() + answerable_questions() if key(q) not in done]
    todo.sort(key=lambda q: q["database"])  # one schema prefix per database
    if not todo:
        return
    settings = load_settings()
    llm = make_llm(settings)
    start = time.perf_counter()
    with out_jsonl.open("a") as f:
        for name, qs in itertools.groupby(todo, key=lambda q: q["database"]):
            db = open_database(database_path(name), settings=settings.db)
            system_message = QuerySynthesizer(db, llm).system_message()
            vocab = database_vocabulary(db)
            qs = list(qs)
            for i in range(0, len(qs), 20):  # each prompt over 20 questions in a row: the KV cache keeps the
                chunk = qs[i:i + 20]         # worked examples evaluated, so each call reads only its question
                p: dict[str, dict[str, float | None]] = defaultdict(dict)
                secs: dict[str, dict[str, float]] = defaultdict(dict)
                for variant in VARIANTS:
                    for q in chunk:
                        t0 = time.perf_counter()
                        p[key(q)][variant] = answerable_probability(llm, system_message, q["question"], variant=variant)
                        secs[key(q)][variant] = round(time.perf_counter() - t0, 3)
                for q in chunk:
                    rec = {"key": key(q), "database": name, "kind": q["kind"], "split": q["split"],
                           "question": q["question"], "question_id": q.get("question_id"),
                           "uncovered": uncovered_terms(q["question"], vocab), "p": p[key(q)],
                           "check_s": secs[key(q)]}
                    f.write(json.dumps(rec) + "\n")
                f.flush()
                if time.perf_counter() - start > limit_s:
                    print(f"stopped after {limit_s:.0f} s; run again to go on")
                    return


def grid() -> list[tuple[str, object]]:
    """(signal, thresholds): each yes/no prompt with coverage, and coverage alone (a model without
    probabilities)."""
    from tagql.text2sql.abstain import Thresholds

    ps = [0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
    out: list[tuple[str, object]] = [(v, Thresholds(p_alone=a, p_with_gap=b, min_uncovered=m, coverage_alone=c,
                                                    prompt=v))
                                     for v in VARIANTS for a in ps for b in ps if b >= a for m in (1, 2, 3)
                                     for c in (0, 2, 3)]
    return out + [("coverage", Thresholds(p_alone=0.0, p_with_gap=0.0, coverage_alone=m)) for m in (1, 2, 3, 4)]


CONDITIONS = ("none", "evidence")  # the BIRD run's conditions: no evidence, the evidence as a domain statement


def abstains(r: dict, th, variant: str, condition: str = "none") -> bool:
    """Whether the gate refuses record ``r``: its uncovered words under ``condition`` (with the evidence as
    a domain statement, as the pipeline passes retrieved statements, for "evidence")."""
    from tagql.text2sql.abstain import decide

    uncovered = r.get("uncovered_by", {}).get(condition, r.get("uncovered", []))
    return decide(None if variant == "coverage" else r["p"][variant], uncovered, th).abstain


def score(records: list[dict], th, variant: str, condition: str = "none") -> dict:
    tp = fp = fn = 0
    for r in records:
        abstain = abstains(r, th, variant, condition)
        unanswerable = r["kind"] != "answerable"
        tp += abstain and unanswerable
        fp += abstain and not unanswerable
        fn += (not abstain) and unanswerable
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {"precision": precision, "recall": recall, "tp": tp, "fp": fp, "fn": fn}


def fit(records: list[dict], signals: tuple[str, ...] = (*VARIANTS, "coverage")):
    """The thresholds with the highest recall at precision >= 0.90 on ``records`` (ties: fewer false
    abstentions, then the more conservative thresholds), over the ``signals`` given (condition "none":
    no evidence, the harder case for answerable questions)."""
    best, best_key = None, None
    for variant, th in grid():
        if variant not in signals:
            continue
        s = score(records, th, variant)
        if s["precision"] < 0.90:
            continue
        k = (s["recall"], -s["fp"], -th.p_with_gap, -th.p_alone, th.min_uncovered, -th.coverage_alone)
        if best_key is None or k > best_key:
            best, best_key = (variant, th), k
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split-check", action="store_true", help="check the committed split is the seed-36 split")
    ap.add_argument("--signals", action="store_true", help="compute the signals with the real model (resumable)")
    ap.add_argument("--limit-s", type=float, default=840, help="stop --signals after this many seconds")
    ap.add_argument("--records", default=str(common.RESULTS / "ask" / "abstention_signals.jsonl"))
    ap.add_argument("--bird", nargs="*", default=[str(common.RESULTS / "ask" / "bird.json")],
                    help="bench.ask.bird result files with per-question correctness (EX without abstention; "
                         "default: the recorded run over all 432 questions, both conditions)")
    ap.add_argument("--out", default=str(common.result_path("ask", "abstention")))
    args = ap.parse_args(argv)
    console = Console()
    if args.split_check:
        qs = load_set()
        again = assign_splits([{k: v for k, v in q.items() if k != "split"} for q in qs])
        assert again == qs, "bench/ask/data/unanswerable.json is not the seed-36 split of its questions"
        counts = defaultdict(int)
        for q in qs:
            counts[q["split"]] += 1
        console.print(f"{len(qs)} unanswerable questions, split {dict(counts)}: ok")
        return
    run = common.Run(__spec__, argv)
    records_path = Path(args.records)
    if args.signals:
        signals(records_path, args.limit_s)
    measured = {}
    if records_path.exists():
        measured = {r["key"]: r for r in map(json.loads, records_path.read_text().splitlines()) if r}
    # every question (all 432 answerable ones); the yes/no probabilities of those the model was asked (a
    # prompt counts only when all were)
    records = [{**q, "key": key(q), "p": measured.get(key(q), {}).get("p", {}),
                **({"check_s": measured[key(q)]["check_s"]} if key(q) in measured else {})}
               for q in load_set() + answerable_questions(sample_train=False)]
    report(records, args.bird, args.out, run, console)


def report(records: list[dict], bird_files: list[str], out: str, run, console: Console) -> None:
    from tagql.config import AnswerSettings, load_settings
    from tagql.db import open_database
    from tagql.db.values import value_index
    from tagql.text2sql.abstain import Thresholds, database_vocabulary, uncovered_terms

    cache_dir = load_settings().cache_dir
    vocab = {}
    for name in sorted({r["database"] for r in records}):
        db = open_database(database_path(name))
        vocab[name] = database_vocabulary(db, value_index(db, cache_dir))  # the index the pipeline passes
    for r in records:  # today's coverage check (free), beside the recorded probabilities
        v = vocab[r["database"]]
        r["uncovered_by"] = {"none": uncovered_terms(r["question"], v),
                             "evidence": uncovered_terms(r["question"], v, [r["evidence"]] if r.get("evidence") else [])}
    by_split = defaultdict(list)
    for r in records:
        by_split[r["split"]].append(r)
    measured = tuple(v for v in VARIANTS if all(v in r.get("p", {}) for r in records))
    fitted = fit(by_split["train"], (*measured, "coverage"))  # tuned on train only; dev checks, test reports
    a = AnswerSettings()
    default_th = Thresholds(p_alone=a.abstain_p_alone, p_with_gap=a.abstain_p_with_gap,
                            min_uncovered=a.abstain_min_uncovered, coverage_alone=a.abstain_coverage_alone,
                            prompt=a.abstain_prompt)
    uses_p = default_th.p_alone > 0 or default_th.p_with_gap > 0
    default = (default_th.prompt if uses_p else "coverage", default_th)
    correct: dict[tuple[int, str], bool] = {}
    for path in bird_files:
        for r in json.loads(Path(path).read_text())["records"]:
            correct[(r["question_id"], r["condition"])] = bool(r["correct"])
    table = Table(title="honest abstention: the unanswerable set + all 432 answerable BIRD questions, per split")
    for col in ("decision", "evidence", "split", "unanswerable", "answerable", "precision", "recall",
                "refused answerable", "of them correct", "EX without", "EX with", "n EX"):
        table.add_column(col, justify="right")
    summary: dict[str, dict] = {}
    choices = [("fitted on train", fitted), ("tagql default", default)]
    if fitted == default:
        choices = [("fitted = default", default)]
    for name, choice in choices:
        if choice is None or (choice[0] != "coverage" and choice[0] not in measured):
            continue
        variant, th = choice
        for condition in CONDITIONS:
            for split in ("train", "dev", "test"):
                rs = by_split[split]
                s = score(rs, th, variant, condition)
                ans = [r for r in rs if r["kind"] == "answerable"]
                with_ex = [r for r in ans if (r["question_id"], condition) in correct]
                ok = {r["question_id"] for r in with_ex if correct[(r["question_id"], condition)]}
                refused = [r for r in ans if abstains(r, th, variant, condition)]
                refused_correct = [r for r in refused if r["question_id"] in ok]
                ex_without = len(ok) / len(with_ex) if with_ex else None
                ex_with = (len(ok) - len(refused_correct)) / len(with_ex) if with_ex else None
                per_kind = {}
                for kind in sorted({r["kind"] for r in rs} - {"answerable"}):
                    kr = [r for r in rs if r["kind"] == kind]
                    per_kind[kind] = round(sum(abstains(r, th, variant, condition) for r in kr) / len(kr), 3)
                summary[f"{name}/{condition}/{split}"] = {
                    **s, "n_unanswerable": len(rs) - len(ans), "n_answerable": len(ans),
                    "ex_without": ex_without, "ex_with": ex_with, "n_ex": len(with_ex), "recall_by_kind": per_kind,
                    "refused_answerable": len(refused), "refused_correct": len(refused_correct),
                    # train and dev questions are named (what the rule was fixed on); test ones only counted
                    **({"refused_questions": [{"question_id": r["question_id"], "question": r["question"],
                                               "uncovered": r["uncovered_by"][condition]} for r in refused]}
                       if split != "test" else {})}
                table.add_row(name, condition, split, str(len(rs) - len(ans)), str(len(ans)),
                              f"{s['precision']:.3f}", f"{s['recall']:.3f}", str(len(refused)),
                              str(len(refused_correct)), "-" if ex_without is None else f"{ex_without:.3f}",
                              "-" if ex_with is None else f"{ex_with:.3f}", str(len(with_ex)))
    console.print(table)
    console.print(f"fitted on train: {fitted}; tagql's default: {default}")
    secs = sorted(t for r in records for t in r.get("check_s", {}).values() if isinstance(r.get("check_s"), dict))
    for r in records:
        if r["split"] == "test":  # the test part is counted, not listed question by question
            r.pop("uncovered_by", None)
    run.save(out, {"fitted": {"signal": fitted[0], **vars(fitted[1])} if fitted else None,
                   "fitted_on": "train (unanswerable train part + the 215 answerable train questions)",
                   "default": {"signal": default[0], **vars(default[1])}, "summary": summary,
                   "check_s_median": secs[len(secs) // 2] if secs else None,
                   "bird_records": bird_files, "records": records})
    if fitted is not None:
        env = {f"TAGQL_ANSWER__ABSTAIN_{k.upper()}": v for k, v in vars(fitted[1]).items()}
        Path(out).with_suffix(".env").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
