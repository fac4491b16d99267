"""WordNet relations between single words, for synonym-robust routing (Spider-Syn).

Spider-Syn's annotators replaced schema words with synonyms ("singer" -> "vocalist"), hypernyms
("player" -> "participant") and siblings ("car" -> "vehicle" -> "truck"). Of the single-word
substitutions in Spider-Syn's *train* split, WordNet 3.0 relates 79% (weighted by count): a shared
synset 35%, a hypernym 19%, a sister (shared hypernym) 13%, a hyponym 6%, two hypernym steps 5%.
So :class:`WordNet` lists, for a schema word, the words a question may use instead, and
:class:`tagql.routing.lexicon.SoftLexicon` adds the schema word back when a question uses one.

The shipped ``data/wordnet.json.gz`` is compiled by :func:`compile_wordnet` from the Princeton
WordNet 3.0 database files (see ``data/ATTRIBUTION.md``): single alphabetic lemmas of nouns, verbs
and adjectives, each word's synsets in WordNet's sense order (most frequent sense first), and the
hypernym links between synsets.

    python -m tagql.routing.wordnet /path/to/wordnet-3.0/dict   # rewrite data/wordnet.json.gz
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

_DATA = Path(__file__).parent / "data" / "wordnet.json.gz"
_WORD = re.compile(r"^[a-z]{3,}$")
_POS = {"noun": "n", "verb": "v", "adj": "a"}
RELATIONS = ("synonym", "hypernym", "hyponym", "sister")


def compile_wordnet(dict_dir: str | Path) -> dict:
    """The compact form of a WordNet database directory (``data.noun``, ``index.noun``, ...)."""
    root = Path(dict_dir)
    synsets: list[list[int]] = []
    hyper_offsets: list[list[tuple[str, str]]] = []
    at: dict[tuple[str, str], int] = {}
    words: dict[str, int] = {}

    def word_id(w: str) -> int:
        return words.setdefault(w, len(words))

    for name, pos in _POS.items():
        for line in (root / f"data.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):  # licence header
                continue
            f = line.split()
            n_words = int(f[3], 16)
            lemmas = [w.lower().split("(")[0] for w in f[4: 4 + 2 * n_words: 2]]
            i = 4 + 2 * n_words
            n_ptr = int(f[i])
            ptrs = [f[i + 1 + 4 * k: i + 5 + 4 * k] for k in range(n_ptr)]
            at[(pos, f[0])] = len(synsets)
            synsets.append([word_id(w) for w in dict.fromkeys(lemmas) if _WORD.match(w)])
            hyper_offsets.append([(("a" if p in "as" else p), off) for sym, off, p, _ in ptrs if sym in ("@", "@i")])
    hypernyms = [[at[h] for h in hs if h in at] for hs in hyper_offsets]
    senses: dict[int, list[int]] = {}
    for name, pos in _POS.items():
        for line in (root / f"index.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            f = line.split()
            if not _WORD.match(f[0]):
                continue
            n_synsets, n_ptr = int(f[2]), int(f[3])
            offsets = f[6 + n_ptr: 6 + n_ptr + n_synsets]
            ids = senses.setdefault(word_id(f[0]), [])
            ids += [at[(pos, o)] for o in offsets if (pos, o) in at]
    order = sorted(words, key=words.get)
    return {
        "source": "Princeton WordNet 3.0",
        "words": order,
        "senses": [senses.get(i, []) for i in range(len(order))],
        "synsets": synsets,
        "hypernyms": hypernyms,
    }


class WordNet:
    """Words related to a word through WordNet synsets and hypernym links."""

    def __init__(self, data: dict) -> None:
        self.words: list[str] = data["words"]
        self.index = {w: i for i, w in enumerate(self.words)}
        self.senses: list[list[int]] = data["senses"]
        self.synsets: list[list[int]] = data["synsets"]
        self.hypernyms: list[list[int]] = data["hypernyms"]
        hyponyms: list[list[int]] = [[] for _ in self.synsets]
        for s, hs in enumerate(self.hypernyms):
            for h in hs:
                hyponyms[h].append(s)
        self.hyponyms = hyponyms

    def lemma(self, word: str) -> str | None:
        """``word`` or its singular as WordNet lists it (``countries`` -> ``country``), else None."""
        w = word.lower()
        for cand in (w, w[:-3] + "y" if w.endswith("ies") else "", w[:-2] if w.endswith("es") else "",
                     w[:-1] if w.endswith("s") else ""):
            if cand and cand in self.index:
                return cand
        return None

    def related(self, word: str, *, senses: int = 3, max_sisters: int = 30) -> dict[str, str]:
        """Word -> its closest relation to ``word`` (one of :data:`RELATIONS`, closest first), over the
        first ``senses`` senses of ``word``. Sisters share a hypernym; a hypernym with more than
        ``max_sisters`` hyponyms is too general to make them alike."""
        lemma = self.lemma(word)
        if lemma is None:
            return {}
        out: dict[str, str] = {}

        def add(synset: int, relation: str) -> None:
            for w in self.synsets[synset]:
                name = self.words[w]
                if name != lemma and name not in out:
                    out[name] = relation

        mine = self.senses[self.index[lemma]][:senses]
        for s in mine:
            add(s, "synonym")
        for s in mine:
            for h in self.hypernyms[s]:
                add(h, "hypernym")
        for s in mine:
            for h in self.hyponyms[s]:
                add(h, "hyponym")
        for s in mine:
            for h in self.hypernyms[s]:
                if len(self.hyponyms[h]) <= max_sisters:
                    for sib in self.hyponyms[h]:
                        if sib != s:
                            add(sib, "sister")
        return out


@lru_cache(maxsize=1)
def load_wordnet(path: str | None = None) -> WordNet:
    with gzip.open(Path(path) if path else _DATA, "rt", encoding="utf-8") as f:
        return WordNet(json.load(f))


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m tagql.routing.wordnet WORDNET_DICT_DIR")
    data = compile_wordnet(argv[0])
    with gzip.open(_DATA, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"{_DATA}: {len(data['words'])} words, {len(data['synsets'])} synsets, {_DATA.stat().st_size:,} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
