"""LLM-written alternatives for schema words in the router's soft lexicon, tuned on Spider **train**
questions (issue 4), side by side with the lexicon as built (WordNet + mined substitutions).

    python -m bench.routing.llm_synonyms [--collection spider-ctl] [--questions 600]

1. The local LLM lists, for every schema word of the collection (1,446 for Spider's 166 databases),
   up to 5 words or phrases a person might use instead (few-shot, one `word: alt, alt` line per word);
   cached in the collection's directory (`llm_synonyms.json`), so a second run only routes. Cost:
   words per minute. Single-word alternatives become thesaurus relations of the soft lexicon
   (`SoftLexicon(related=...)`, merged with WordNet's), phrases become mined substitutions.
2. As in `bench/routing/wordnet.py`: the 140 train databases are split in two halves (seed 0); the
   measured questions are train questions of half B whose Spider-Syn version differs, routed in their
   plain and synonym versions; mined substitutions come from half A only. Each variant swaps the
   loaded router's lexicon (no rebuild). No dev question is used.

Measured in session 9 and not kept in the router: every weight lowered both plain and Spider-Syn
recall (docs/routing.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from rich.progress import Progress
from bench.routing.spider_train_halves import lexicon_tuning_set, recall_columns, route_with_lexicon

from tagql.config import load_settings
from tagql.llm import make_llm
from tagql.llm.base import LLM, Message, system, user
from tagql.routing.collection import Collection
from tagql.routing.lexicon import related_schema_words
from tagql.routing.synonyms import mined_reverse
from tagql.text import STOP_WORDS, stem
from tagql.routing.wordnet import load_wordnet
from tagql.embeddings import make_embedder

from bench import common

OUT = common.result_path("routing", "llm_synonyms")
WEIGHTS = (0.4, 0.6, 0.85)

SYSTEM = (
    "You help a search engine match the words of questions to the words of database schemas. For each "
    "schema word you are given, list up to 5 other words or short phrases a person might use for it in a "
    "question: synonyms, near-synonyms, a more general word, a common paraphrase. Write one line per "
    "word, in the given order: `word: alternative, alternative, ...`. Nothing else."
)
# hand-written; none of these words is an evaluation question's
EXAMPLE_WORDS = ["employee", "price", "nationality", "hometown", "enrollment"]
EXAMPLE_REPLY = (
    "employee: worker, staff member, personnel, staff\n"
    "price: cost, charge, fee, amount\n"
    "nationality: citizenship, country of origin, origin\n"
    "hometown: home city, birthplace, native town\n"
    "enrollment: registration, number of students, enrolment"
)
_LINE = re.compile(r"^\s*[-*]?\s*([A-Za-z][A-Za-z ]*?)\s*:\s*(.+)$")
_ALPHA = re.compile(r"^[a-z][a-z ]*[a-z]$")


def parse_reply(text: str, asked: Iterable[str]) -> dict[str, list[str]]:
    """``word: alt, alt`` lines -> {asked word: [alternatives]}; lines about other words are ignored."""
    wanted = set(asked)
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m.group(1).lower() not in wanted:
            continue
        word = m.group(1).lower()
        alts = []
        for alt in m.group(2).split(","):
            a = " ".join(alt.strip().strip("`'\".").lower().split())
            if _ALPHA.match(a) and a != word and len(a.split()) <= 3 and a not in alts:
                alts.append(a)
        out[word] = alts[:5]
    return out


def generate_synonyms(
    words: list[str], llm: LLM, *, batch: int = 12, cache: dict[str, list[str]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, list[str]]:
    """{word: alternatives} for ``words``, asking the LLM only about words not in ``cache``."""
    known = dict(cache or {})
    todo = [w for w in dict.fromkeys(words) if w not in known]
    for i in range(0, len(todo), batch):
        chunk = todo[i: i + batch]
        messages = [system(SYSTEM), user("\n".join(EXAMPLE_WORDS)), Message("assistant", EXAMPLE_REPLY),
                    user("\n".join(chunk))]
        reply = llm.complete(messages, max_tokens=24 * len(chunk))
        got = parse_reply(reply.text, chunk)
        for w in chunk:
            known[w] = got.get(w, [])
        if progress:
            progress(min(i + batch, len(todo)), len(todo))
    return {w: known[w] for w in dict.fromkeys(words)}


def lexicon_evidence(
    synonyms: dict[str, list[str]], weight: float,
) -> tuple[dict[str, dict[str, float]], dict[str, list[str]]]:
    """(related, phrases): single-word alternatives as question stem -> {schema stem: weight}, and
    multi-word ones as phrase -> [schema word] (the form of mined substitutions)."""
    related: dict[str, dict[str, float]] = {}
    phrases: dict[str, list[str]] = {}
    for word, alts in synonyms.items():
        target = stem(word)
        for alt in alts:
            parts = [p for p in alt.split() if p not in STOP_WORDS]
            if len(alt.split()) == 1:
                key = stem(alt)
                if key != target:
                    slot = related.setdefault(key, {})
                    slot[target] = max(slot.get(target, 0.0), weight)
            elif parts:
                phrases.setdefault(alt, [])
                if word not in phrases[alt]:
                    phrases[alt].append(word)
    return related, phrases


def load_cache(path: Path, model: str | None = None) -> dict[str, list[str]]:
    """The saved alternatives; {} when missing, unreadable, or written by another ``model``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("synonyms", {}) if model is None or data.get("model") == model else {}


def save_cache(path: Path, model: str, synonyms: dict[str, list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"model": model, "synonyms": synonyms}, indent=0, sort_keys=True))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="spider-ctl")
    ap.add_argument("--questions", type=int, default=600)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    run = common.Run(__spec__, argv)

    settings = load_settings()
    coll = Collection.load(args.collection, settings)
    router = coll.router("ours", embedder=make_embedder())
    lex = router.lexicon
    words = list(lex.words)

    llm = make_llm(settings, backend="local")
    cache_path = coll.path / "llm_synonyms.json"
    cached = load_cache(cache_path, llm.name)
    t = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task("LLM alternatives for schema words", total=len([w for w in words if w not in cached]))
        synonyms = generate_synonyms(words, llm, cache=cached,
                                     progress=lambda done, total: progress.update(task, completed=done))
    gen_s = time.perf_counter() - t
    save_cache(cache_path, llm.name, synonyms)
    new_words = len(words) - len([w for w in words if w in cached])
    print(f"{len(words)} schema words, {new_words} asked now in {gen_s:.0f} s "
          f"({60 * new_words / gen_s if new_words and gen_s else 0:.0f} words/min); "
          f"{sum(1 for v in synonyms.values() if v)} with alternatives", flush=True)

    golds, sets, mined = lexicon_tuning_set(coll, args.questions)
    cfg = router.cfg
    mined_a = mined_reverse(cfg.mined_min_count, synonyms=mined)
    wordnet = related_schema_words(words, load_wordnet(), {"synonym": cfg.wordnet_synonym,
                                                            "hypernym": cfg.wordnet_hypernym}, senses=cfg.wordnet_senses)

    def lexicon(related, mined):
        return lex.variant(mined=mined, related=related)

    def merged(weight: float, unknown_only: bool = False) -> dict[str, dict[str, float]]:
        """WordNet's relations plus the LLM's single words (optionally only for question words that are
        no schema word of the collection, like the embedding soft match)."""
        out = {k: dict(v) for k, v in wordnet.items()}
        for k, v in lexicon_evidence(synonyms, weight)[0].items():
            if unknown_only and k in lex.known:
                continue
            slot = out.setdefault(k, {})
            for st, x in v.items():
                slot[st] = max(slot.get(st, 0.0), x)
        return out

    variants = {"as built (WordNet + mined)": lexicon(wordnet, mined_a)}
    for w in WEIGHTS:
        phrases = lexicon_evidence(synonyms, w)[1]
        variants[f"+ LLM words {w}"] = lexicon(merged(w), mined_a)
        variants[f"+ LLM words {w} + phrases"] = lexicon(merged(w), {**phrases, **mined_a})
    for w in (0.2, 0.4):
        variants[f"+ LLM words {w}, unknown words only"] = lexicon(merged(w, unknown_only=True), mined_a)
    results: dict = {"collection": args.collection, "questions": len(golds), "schema_words": len(words),
                     "generated_now": new_words, "generation_s": round(gen_s, 1), "model": llm.name, "variants": {}}
    print(f"{'variant':<42}{'plain R@1':>10}{'syn R@1':>10}{'plain R@5':>10}{'syn R@5':>10}", flush=True)
    for name, lx in variants.items():
        row = route_with_lexicon(router, lx, sets, golds)
        results["variants"][name] = row
        print(f"{name:<42}{recall_columns(row)}", flush=True)
    run.save(args.out, results, indent=2)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
