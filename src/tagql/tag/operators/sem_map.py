"""``map``: a new column the LM computes per row, as text (``sem_map``) or as a number (``LM_NUMBER``)."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tagql.llm.base import system, user
from tagql.tag.operators.base import PROMPTS, EngineBase, TableBase, _one_cache_batch

if TYPE_CHECKING:
    from tagql.tag.operators.table import SemTable


_SCALED_NUMBER: dict[str, Any] = {
    "type": "object",
    "properties": {"value": {"type": "number"}, "scale": {"enum": ["units", "thousand", "million", "billion"]}},
    "required": ["value", "scale"],
}
_SCALES = {"units": 1.0, "thousand": 1e3, "million": 1e6, "billion": 1e9}


def _plain_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _scaled_number(text: str) -> float | None:
    """``{"value": 39.5, "scale": "million"}`` -> 39500000.0; a value already written in full
    (``{"value": 39933977, "scale": "million"}``, 1,000 or more) is not scaled again."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return float(obj)  # a backend that ignored the schema: a bare number is still one
    try:
        value = float(obj["value"])
    except (KeyError, TypeError, ValueError):
        return None
    scale = _SCALES.get(str(obj.get("scale")), 1.0)
    return value * scale if abs(value) < 1000 else value


def _options(options: Sequence[Any]) -> list[str]:
    """The options of a choice as asked: text, first spelling kept, blanks left out."""
    return [str(o) for o in dict.fromkeys(options) if str(o).strip()]


def _choice_tag(instruction: str, options: list[str]) -> str:
    """A choice's cache instruction: the instruction and a digest of its options (new options, new answers)."""
    return f"{instruction} [options {hashlib.sha256(chr(10).join(options).encode()).hexdigest()[:16]}]"


class MapEngine(EngineBase):
    def map_many(self, instruction: str, items: list[str], *, max_tokens: int = 48) -> list[str]:
        sys_text = PROMPTS.render("map_system", instruction=instruction)
        def one(item: str) -> str:
            text = self.call(
                "map", instruction, item,
                [system(sys_text), user(PROMPTS.render("map_user", record=item))], max_tokens=max_tokens,
            )
            return text.strip().splitlines()[0].strip() if text.strip() else ""

        return self._each("map", items, one)

    def choose_many(self, instruction: str, items: list[str], options: Sequence[str], *,
                    per_call: int = 1) -> list[str | None]:
        """One of ``options`` per item (``LM_CHOOSE``: the stored value a lost key pointed at, "the publisher of
        Batman" -> 'DC Comics'), decoding constrained to the options: a grammar on the local model, a JSON
        enum on endpoints. Asked to judge "the publisher of X is Marvel Comics" one claim at a time, the 1.5B
        model said yes to 2 of 4 Marvel heroes and to Superman; choosing among the three stored publishers it
        placed 7 of 8 heroes. A reply that is none of the options is ``None`` (the row joins nothing).

        ``per_call > 1`` packs that many items into numbered records, one grammar-forced option per line.
        Not the default: on the lost links of the train databases it placed fewer rows right (car makers 21
        -> 17 of 22 at 8 per call, cities 35 -> 31 of 48, heroes 21 -> 8 of 48) and took no less time, the
        one-per-call prompts sharing their cached prefix (``bench/tag/choose_batch.py``)."""
        options = _options(options)
        if not options:
            return [None] * len(items)
        sys_text = PROMPTS.render("choose_system", instruction=instruction, options="; ".join(options))
        rule = " | ".join(json.dumps(o, ensure_ascii=False) for o in options)
        grammar = "root ::= " + rule
        schema = {"type": "object", "properties": {"answer": {"enum": options}}, "required": ["answer"]}
        by_lower = {o.lower(): o for o in options}
        width = max(len(o) for o in options)
        tag = _choice_tag(instruction, options)

        def one(item: str) -> str | None:
            text = self.call("choose", tag, item,
                             [system(sys_text), user(PROMPTS.render("map_user", record=item))],
                             max_tokens=width + 16, grammar=grammar, json_schema=schema)
            if text.startswith("{"):
                try:
                    text = str(json.loads(text).get("answer", ""))
                except (ValueError, AttributeError):
                    return None
            return by_lower.get(text.strip().strip('"').lower())

        if per_call <= 1:
            return self._each("choose", items, one)
        todo = self.uncached_choices(instruction, items, options)
        chosen: dict[str, str | None] = {}
        value = "|".join(re.escape(o.lower()) for o in sorted(options, key=len, reverse=True))
        batch_sys = PROMPTS.render("choose_batch_system", instruction=instruction, options="; ".join(options))
        for chunk in self._chunks("choose", todo, per_call):
            got = self._numbered_batch("choose_batch", tag, batch_sys, chunk, tag="record", rule=rule, value=value,
                                       what="option", noun="record", ask=PROMPTS["choose_batch_ask"],
                                       tokens_per_item=width // 2 + 8)
            chosen.update((item, by_lower.get(v)) for item, v in zip(chunk, got))
        return [chosen[it] if it in chosen else one(it) for it in items]

    def uncached_choices(self, instruction: str, items: Sequence[str], options: Sequence[str]) -> list[str]:
        """The distinct ``items`` whose ``choose_many`` answer among ``options`` is not cached (each one an
        LM call)."""
        return self._uncached("choose", _choice_tag(instruction, _options(options)), items)

    def uncached_facts(self, kind: str, instruction: str, items: Sequence[str]) -> list[str]:
        """The distinct ``items`` whose ``map_many`` (``kind="map"``) or ``number_many`` (``"number"``, the
        default scaled style) answer is not cached (each one an LM call)."""
        return self._uncached("map" if kind == "map" else "number_scaled", instruction, items)

    def _uncached(self, kind: str, instruction: str, items: Sequence[str]) -> list[str]:
        return [it for it in dict.fromkeys(items) if self.cache.get(self._key(kind, instruction, it)) is None]

    def number_many(self, instruction: str, items: list[str], *, style: str = "scaled") -> list[float | None]:
        """One number per item (``LM_NUMBER``: a year, a population, a month's number), constrained so the
        reply sorts as one (``map`` answers in words: "about 39 million"). A reply that is not a number
        is ``None`` (sorted last), never a guess.

        ``style="scaled"`` (default) asks for ``{"value": ..., "scale": "units"|"thousand"|"million"|
        "billion"}``: a bare number lets the 1.5B model switch units between rows (California 39.5,
        New York 1950, Virginia 800000: "in millions" for some states, people for others), and with a
        scale beside the value it writes either the full count or the value in millions and says which.
        ``style="plain"`` is the bare JSON number (``bench/tag/lm_numbers.py`` compares the two)."""
        plain = style == "plain"
        sys_text = PROMPTS.render("number_system", instruction=instruction,
                                  reply=PROMPTS["number_reply_plain" if plain else "number_reply_scaled"])
        schema = {"type": "number"} if plain else _SCALED_NUMBER
        def one(item: str) -> float | None:
            text = self.call("number" if plain else "number_scaled", instruction, item,
                             [system(sys_text), user(PROMPTS.render("number_user", record=item))],
                             max_tokens=16 if plain else 40, json_schema=schema)
            return _plain_number(text) if plain else _scaled_number(text)

        return self._each("number", items, one)


class MapTable(TableBase):
    @_one_cache_batch
    def sem_map(self, instruction: str, new_column: str, *, max_tokens: int = 48) -> SemTable:
        t0, c0 = time.perf_counter(), self.engine.stats.lm_calls
        per_row, distinct = self._distinct(instruction, "map")
        values = dict(zip(distinct, self.engine.map_many(instruction, distinct, max_tokens=max_tokens)))
        out = type(self)(self.columns + [new_column], [r + (values[k],) for r, k in zip(self.rows, per_row)],
                       self.engine)
        self._record("map", instruction, len(self.rows), len(distinct), t0, c0)
        return out
