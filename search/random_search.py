"""`RandomSearch`: unseen random candidates every round; the baseline the other strategies must beat."""

from __future__ import annotations

from ..annotate.candidate import Candidate
from .strategy import SearchStrategy


class RandomSearch(SearchStrategy):
    """Proposes fresh random samples and learns nothing."""

    name = "random"

    def propose(self, n: int) -> list[Candidate]:
        return self.random_unseen(n)
