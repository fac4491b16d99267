"""Benchmarks of the text toolkit (tagql.text): its BM25 beside bm25s."""
