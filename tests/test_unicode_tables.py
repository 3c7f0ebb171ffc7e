"""bert_tf/unicode_tables.py holds exactly what scanning all of Unicode with each predicate gives.

The tables are what tokenization.codepoint_ranges returns for these predicates under the
Unicode version they were made with (the scan is the definition; the table saves each process
that builds a tokenizer about two seconds). After changing a predicate, or to make the tables
for another Python's Unicode version, regenerate them from the repository root with
  python -m tests.test_unicode_tables
"""

import importlib
import pprint
import sys
import unicodedata

import pytest

from bert_tf import io
from bert_tf import tokenization
from bert_tf import unicode_tables

# Every predicate a tokenizer scans, by "module.function" (the table's key).
PREDICATES = ("bert_tf.tokenization.is_removed_when_cleaning",
              "bert_tf.tokenization.is_mark_nonspacing",
              "bert_tf.tokenization.is_punctuation",
              "bert_tf.tokenization.is_whitespace",
              "bert_tf.text.is_python_space",
              "bert_tf.tasks.tagging.serving_module.is_word_delimiter")


def predicate(key):
  module, name = key.rsplit(".", 1)
  return getattr(importlib.import_module(module), name)


def scans():
  return {key: tokenization.scan_codepoints(predicate(key)) for key in PREDICATES}


def write_tables(path):
  """Writes bert_tf/unicode_tables.py from this Python's Unicode database."""
  with open(path, encoding="utf-8") as f:
    head = f.read().split("\nUNIDATA_VERSION = ")[0]
  tables = pprint.pformat(scans(), width=100, compact=True, indent=1)
  io.write_text(path, f"{head}\nUNIDATA_VERSION = {unicodedata.unidata_version!r}\n"
                      f"MAXUNICODE = {sys.maxunicode}\nRANGES = {tables}\n")


@pytest.mark.skipif(unicodedata.unidata_version != unicode_tables.UNIDATA_VERSION,
                    reason="the tables are for another Unicode version: this Python scans")
def test_the_tables_are_the_scans_of_every_predicate():
  assert sorted(unicode_tables.RANGES) == sorted(PREDICATES)
  assert unicode_tables.RANGES == scans(), (
      "a predicate changed: regenerate bert_tf/unicode_tables.py (python -m "
      "tests.test_unicode_tables)")


def test_codepoint_ranges_uses_a_table_only_for_its_unicode_version(monkeypatch):
  punctuation = tokenization.is_punctuation
  tokenization.codepoint_ranges.cache_clear()
  try:
    monkeypatch.setitem(unicode_tables.RANGES, "bert_tf.tokenization.is_punctuation",
                        ((0x21, 0x21),))
    assert tokenization.codepoint_ranges(punctuation) == ((0x21, 0x21),)
    tokenization.codepoint_ranges.cache_clear()
    monkeypatch.setattr(unicode_tables, "UNIDATA_VERSION", "0.0.0")
    assert tokenization.codepoint_ranges(punctuation) == tokenization.scan_codepoints(
        punctuation)
  finally:
    tokenization.codepoint_ranges.cache_clear()


def test_a_predicate_without_a_table_is_scanned():
  def is_x(char):
    return char in "xX"
  assert tokenization.codepoint_ranges(is_x) == ((ord("X"), ord("X")), (ord("x"), ord("x")))


if __name__ == "__main__":
  write_tables(unicode_tables.__file__)
  print(f"wrote {unicode_tables.__file__} (Unicode {unicodedata.unidata_version})")
