"""Noticing a reply the model repeats word for word after being told it failed.

Shown its own failed reply and the error, the 1.5B model mostly writes the same reply again: 135 of the 149
BIRD questions whose SQL still failed after the repair round had repeated it exactly
(``bench/results/ask/bird.json``), and the TAG planner did the same on the hidden-column pool. A repeat says
the repair conversation is not being taken in, so the callers try once more: text-to-SQL samples repairs from
that conversation when its backend can sample; otherwise, and in the TAG planner, the model is asked from the
first prompt with only the error as a note -- without the reply it keeps copying. Off by default
(``answer.fresh_retry_on_repeat``): with the 1.5B model neither won back a BIRD dev or test question.
"""

from __future__ import annotations


class RepeatWatch:
    """Records failed replies; :meth:`failed` says when one repeats an earlier one, at most once per question
    (so the extra try it grants is granted once)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.noticed = False
        self._seen: set[str] = set()

    def failed(self, reply: str) -> bool:
        """Record ``reply`` as failed; True when it is, up to whitespace, a failed reply seen before, the first
        time that happens."""
        said = " ".join(reply.split())
        repeated = self.enabled and not self.noticed and said in self._seen
        self._seen.add(said)
        self.noticed = self.noticed or repeated
        return repeated
