"""One text toolkit for every stage: tokenising, stemming, stop words and BM25.

Knowledge retrieval, schema routing, the TAG methods and the SQL repairs all turn text into words and
compare words; they do it through these functions, so a word means the same thing everywhere:

- :mod:`tagql.text.tokenise` -- :func:`split_identifier` (``singer_in_concert`` / ``StuID`` -> words),
  :func:`word_tokens` (lower-cased regex tokens, one of a few named token shapes) and :func:`terms`
  (identifier split + stop words + stem: the bag of words BM25 and the routers compare).
- :mod:`tagql.text.stem` -- :func:`stem` (Snowball English, memoised) and :func:`stems` (a text's stem set).
- :mod:`tagql.text.stopwords` -- :data:`STOP_WORDS`.
- :mod:`tagql.text.bm25` -- :class:`BM25`, Okapi BM25 over token lists (an inverted index with
  precomputed term weights; a query is one gather per distinct term and one bincount).
"""

from tagql.text.bm25 import BM25
from tagql.text.stem import stem, stems
from tagql.text.stopwords import ENGLISH_STOP_WORDS, STOP_WORDS
from tagql.text.tokenise import ALNUM, LETTERS, LETTERS_DIGITS, WORD, split_identifier, terms, word_tokens

__all__ = ["ALNUM", "BM25", "ENGLISH_STOP_WORDS", "LETTERS", "LETTERS_DIGITS", "STOP_WORDS", "WORD",
           "split_identifier", "stem", "stems", "terms", "word_tokens"]
