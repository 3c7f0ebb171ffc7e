"""Reading plain-text corpora: input file lists, globs and UTF-8 lines with clear errors."""

from typing import Iterator, List, Tuple

import tensorflow as tf


class CorpusError(ValueError):
  """An input corpus that cannot be read as UTF-8 text, or a pattern that matches nothing."""


def expand_input_files(spec: str, flag_name: str = "input_file") -> List[str]:
  """Expands a comma-separated list of paths and globs (any tf.io.gfile filesystem).

  Unlike the original, files matched by one glob are sorted, so the order (and with it the
  output for a seed) does not depend on directory order. A pattern that matches nothing is an
  error naming the pattern and the flag.

  Args:
    spec: e.g. "a.txt,shards/part-*.txt" or "gs://bucket/corpus/*.txt".
    flag_name: the flag the spec came from, named in errors.

  Returns:
    The matched files, in the order of the patterns, each glob's matches sorted.
  """
  files: List[str] = []
  patterns = [p.strip() for p in spec.split(",") if p.strip()]
  if not patterns:
    raise CorpusError(f"--{flag_name} is empty")
  for pattern in patterns:
    matches = sorted(tf.io.gfile.glob(pattern))
    matches = [m for m in matches if not tf.io.gfile.isdir(m)]
    if not matches:
      raise CorpusError(f"--{flag_name}: no file matches {pattern!r}")
    files.extend(matches)
  return files


def read_lines(path: str, errors: str = "strict") -> Iterator[Tuple[int, str]]:
  """Yields (line_number, line) for each line of a UTF-8 file, 1-based, newline removed.

  Args:
    path: any tf.io.gfile path.
    errors: "strict" raises CorpusError naming the file, line and byte offset of invalid
      UTF-8; "replace" substitutes U+FFFD (which the tokenizer then deletes); "skip" drops
      the line.
  """
  if errors not in ("strict", "replace", "skip"):
    raise CorpusError(f"unknown errors mode {errors!r}; use strict, replace or skip")
  with tf.io.gfile.GFile(path, "rb") as f:
    for number, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        if errors == "strict":
          raise CorpusError(
              f"{path}:{number}: invalid UTF-8 at byte {e.start} of the line "
              f"({raw[max(0, e.start - 10):e.end + 10]!r})") from None
        if errors == "skip":
          continue
        line = raw.decode("utf-8", "replace")
      yield number, line.rstrip("\n").rstrip("\r")


def total_size(paths: List[str]) -> int:
  """Total size in bytes of the files (for progress ETA)."""
  return sum(tf.io.gfile.stat(p).length for p in paths)
