"""Tests of tagql.llm: the local llama.cpp backend, lookup decoding, model packs, the OpenAI-compatible backend."""
