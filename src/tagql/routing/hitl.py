"""Human in the loop: say when no candidate schema looks right (interfaces show the candidates and let
the user pick; see :func:`tagql.cli.output.choose_candidate`)."""

from __future__ import annotations

from collections.abc import Sequence

from tagql.routing.candidate import Candidate

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
