"""Tests of tagql.text2sql: SQL synthesis from a question, answer generation."""
