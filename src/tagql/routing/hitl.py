"""Human in the loop: show the top candidate schemas, let the user pick; say when nothing matches."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tagql.routing.router import Candidate

LOW_CONFIDENCE = 0.2  # Spider: flags 1.9% of dev questions and 7 of 12 off-topic ones (docs/routing.md)


def confidence_note(cands: Sequence[Candidate]) -> str | None:
    """A one-line warning when no database looks right (instead of silently picking one)."""
    if not cands:
        return "no database in the collection matches this question"
    c = cands[0].confidence
    if c is not None and c < LOW_CONFIDENCE:
        return (f"low confidence ({c:.2f}): the question may be about none of the databases "
                f"(best guess: {cands[0].database})")
    return None


def render_candidates(cands: Sequence[Candidate], n: int = 5) -> str:
    lines = []
    for i, c in enumerate(cands[:n], 1):
        conf = f" confidence {c.confidence:.2f}" if c.confidence is not None else ""
        lines.append(f"{i}. {c.database}: {', '.join(c.tables)} (score {c.score:.2f}{conf})")
    return "\n".join(lines)


def choose_candidate(cands: Sequence[Candidate], input_fn: Callable[[str], str],
                     print_fn: Callable[[str], None] = print, n: int = 5) -> Candidate:
    """Print the top-``n`` candidates and return the one the user picks (1-based; empty = 1)."""
    from tagql.routing.errors import BadSource

    if not cands:
        raise BadSource("no candidate schemas to choose from")
    print_fn(render_candidates(cands, n))
    shown = min(n, len(cands))
    while True:
        raw = (input_fn(f"pick a schema [1-{shown}]") or "1").strip()
        if raw.isdigit() and 1 <= int(raw) <= shown:
            return cands[int(raw) - 1]
        print_fn(f"please answer a number from 1 to {shown}")
