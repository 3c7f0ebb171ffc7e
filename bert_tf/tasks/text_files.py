"""A task's text input files: read as UTF-8 and split into CSV/TSV records with the line each
starts on, every error naming the file and line (the task's own error class)."""

import csv
import io as io_lib
from typing import Callable, List, Tuple

from absl import logging

from bert_tf import io

# A task's error for a bad input file: built from one message naming the file and line.
ErrorType = Callable[[str], Exception]


def read_utf8(path: str, error: ErrorType, what: str = "data file") -> str:
  """The whole file as text, without a leading byte-order mark; FileNotFoundError for a missing
  file or a folder, `error` naming the line of the first byte that is not UTF-8."""
  if not io.exists(path):
    raise FileNotFoundError(f"{path}: {what} not found")
  if io.isdir(path):
    raise FileNotFoundError(f"{path}: {what} is a directory, expected a file")
  with io.open_file(path, "rb") as f:
    data = f.read()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise error(f"{path}:{line}: invalid UTF-8 ({data[e.start:e.end]!r}: {e.reason})") from None
  return text[1:] if text.startswith("\ufeff") else text


def csv_rows(path: str, text: str, delimiter: str, quoting: bool,
             error: ErrorType) -> List[Tuple[int, List[str]]]:
  """(line number, cells) of every record, the line number being where the record starts.

  quoting: standard CSV (quoted cells may hold delimiters and line breaks); else the original
  run_classifier's reading, where '"' is ordinary text and records are lines.
  """
  # csv refuses fields over its limit (131072 characters by default): a long document is data,
  # not an error. No field is longer than the text, so that bound is enough (never lowered:
  # the limit is the csv module's, shared by the process).
  if len(text) >= csv.field_size_limit():
    csv.field_size_limit(len(text) + 1)
  if quoting:
    reader = csv.reader(io_lib.StringIO(text, newline=""), delimiter=delimiter)
  else:
    # Lines split at "\n" only, each without any "\r" (tf.gfile's readline drops them: "a\rb"
    # is read as "ab").
    if "\r" in text:
      lines = [io.as_tf_readline(line) for line in text.split("\n")]
      inside = [number for number, (_, joined) in enumerate(lines, start=1) if joined]
      if inside:
        logging.warning("%s: %d line(s) hold a carriage return (\\r) inside their text, first "
                        "line %d: it is deleted, as the original's reader deletes it, joining "
                        "the text either side", path, len(inside), inside[0])
      text = "\n".join(line for line, _ in lines)
    reader = csv.reader(io_lib.StringIO(text, newline="\n"), delimiter=delimiter, quotechar=None)
  rows = []
  start = 1
  try:
    for row in reader:
      rows.append((start, row))
      start = reader.line_num + 1
  except csv.Error as e:  # named by the line the broken record starts on
    raise error(f"{path}:{start}: {e}") from None
  return rows
