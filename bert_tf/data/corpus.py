"""Reading plain-text corpora: input file lists and globs, UTF-8 lines with clear errors.

Shared by every data_prep tool, so they all accept the same --input_file syntax and report bad
input the same way. Local paths use plain Python I/O so that worker processes that only read and
tokenize never import TensorFlow (~0.7 GB each); other schemes (gs://, ram://) use tf.io.gfile.
"""

import dataclasses
import glob
import os
import time
from typing import Callable, Iterator, List, Optional, Sequence

from absl import logging

from bert_tf import io


class InputError(ValueError):
  """Unreadable input text; the message names the file and line."""


@dataclasses.dataclass
class ReadReport:
  """What reading the input found, for the summary and the metadata."""

  files: int = 0
  empty_files: List[str] = dataclasses.field(default_factory=list)
  lines: int = 0
  bytes: int = 0
  invalid_utf8_lines: int = 0
  skipped_lines: int = 0
  carriage_return_lines: int = 0
  documents: int = 0
  segments: int = 0
  tokens: int = 0


ERRORS_MODES = ("strict", "replace", "skip")


# on_long_line(path, line_number, size): line_number() gives the line's number, computed only
# when called (for a byte range it costs a pass over the file).
LongLineCallback = Callable[[str, Callable[[], int], int], None]


def iter_lines(path: str, errors: str, report: ReadReport, max_line_bytes: int = 0,
               on_long_line: Optional[LongLineCallback] = None) -> Iterator[str]:
  """Yields the decoded lines of one file as the original's readline gives them: split on "\\n"
  only, every "\\r" deleted.

  Args:
    path: a local path, or any tf.io.gfile path (gs://, ram://, ...).
    errors: what to do with a line that is not valid UTF-8: "strict" raises InputError naming
      the file and line, "replace" decodes it with U+FFFD (which the tokenizer then deletes),
      "skip" drops the line; replaced and skipped lines are counted in the report.
    report: updated in place.
    max_line_bytes: lines longer than this (if > 0) are passed to on_long_line.
    on_long_line: called as on_long_line(path, line number (a function), the line's bytes).
  """
  if errors not in ERRORS_MODES:
    raise ValueError(f"errors must be one of {ERRORS_MODES}, got {errors!r}")
  report.files += 1
  empty = True
  with io.open_file(path, "rb") as f:
    for line_number, raw in enumerate(f, start=1):
      empty = False
      report.lines += 1
      report.bytes += len(raw)
      if max_line_bytes and len(raw) > max_line_bytes and on_long_line is not None:
        on_long_line(path, lambda n=line_number: n, len(raw))
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        line = _undecodable(raw, e, errors, report, f"{path}:{line_number}")
      if line is not None:
        yield _as_original_reads(line, report)
  if empty:
    report.empty_files.append(path)


def _as_original_reads(line: str, report: ReadReport) -> str:
  """The line as the original's reader gives it (io.as_tf_readline); a line whose "\\r" joins
  text is counted in the report, for a warning."""
  line, joined = io.as_tf_readline(line)
  report.carriage_return_lines += joined
  return line


def warn_read_problems(report: ReadReport) -> None:
  """The warnings of what iter_lines met: empty files, lines that were not valid UTF-8
  (replaced or skipped), and lines with a carriage return inside their text (deleted)."""
  for path in report.empty_files:
    logging.warning("Input file %s is empty", path)
  if report.invalid_utf8_lines:
    logging.warning("%d line(s) were not valid UTF-8 (%s)", report.invalid_utf8_lines,
                    "skipped" if report.skipped_lines else "decoded with U+FFFD")
  if report.carriage_return_lines:
    logging.warning(
        "%d line(s) hold a carriage return (\\r) inside their text: it is deleted, as the "
        "original's reader (TensorFlow's readline) deletes it, so the text either side of it "
        "joins (a file with old Mac line ends is one line: convert it first, e.g. "
        "tr '\\r' '\\n')", report.carriage_return_lines)


def _undecodable(raw: bytes, error: UnicodeDecodeError, errors: str, report: ReadReport,
                 where: str) -> Optional[str]:
  """A line that is not valid UTF-8, handled as `errors` says: counted, then decoded with
  U+FFFD ("replace"), dropped (None, "skip") or refused ("strict").

  Raises:
    InputError: with errors="strict", naming `where` (file:line).
  """
  report.invalid_utf8_lines += 1
  if errors == "strict":
    raise InputError(
        f"{where}: invalid UTF-8 at byte {error.start} of the line "
        f"({raw[error.start:error.start + 4]!r}); pass --errors=replace or --errors=skip to "
        f"accept such lines") from None
  if errors == "skip":
    report.skipped_lines += 1
    return None
  return raw.decode("utf-8", errors="replace")


def is_blank(raw: bytes) -> bool:
  """Whether a raw line is a document boundary: nothing but (Unicode) whitespace once decoded.

  The same test as the readers' `line.strip()` on the decoded line; a line that is not valid
  UTF-8 is never blank (it is text, replaced or skipped).
  """
  if not raw.strip():
    return True
  if raw.isascii():
    return False
  return not raw.decode("utf-8", errors="replace").strip()


def line_number_at(path: str, offset: int) -> int:
  """The 1-based number of the line starting at byte `offset` of a file (for messages)."""
  count = 0
  with io.open_file(path, "rb") as f:
    left = offset
    while left > 0:
      chunk = f.read(min(left, 1 << 20))
      if not chunk:
        break
      count += chunk.count(b"\n")
      left -= len(chunk)
  return count + 1


def iter_piece_lines(path: str, start: int, end: int, errors: str, report: ReadReport,
                     max_line_bytes: int = 0,
                     on_long_line: Optional[LongLineCallback] = None) -> Iterator[str]:
  """Yields the decoded lines (blank ones included) that the byte range [start, end) owns.

  Lets workers read one file in parallel, each from a byte offset, with no pass over the file
  first, and every document read exactly once: a range owns the documents that begin after the
  first blank line starting at or after `start` (for start 0: from the first line) up to the
  first blank line starting at or after `end` (the next range's first separator), so a
  document that straddles `end` is read whole by the range it begins in. A range with no such
  boundary in it owns nothing. Lines are split on "\\n" only, as iter_lines does; each line is
  counted in the report by the one range that yields it.

  Args:
    path: a local path, or any tf.io.gfile path.
    start, end: byte offsets, 0 <= start < end; end may be past the end of the file.
    errors: invalid UTF-8 handling, see iter_lines (an InputError names the file and line).
    report: updated in place (files is counted by the range that starts at 0).
    max_line_bytes: lines longer than this (if > 0) are passed to on_long_line.
    on_long_line: as for iter_lines (the line number costs a pass over the file up to it).
  """
  if errors not in ERRORS_MODES:
    raise ValueError(f"errors must be one of {ERRORS_MODES}, got {errors!r}")
  with io.open_file(path, "rb") as f:
    position = 0
    if start > 0:
      f.seek(start - 1)
      position = start - 1 + len(f.readline())  # the first line that begins at >= start
      while True:  # to the first separator of this range (the previous range stops there)
        if position >= end:
          return  # no boundary in the range: it owns nothing
        raw = f.readline()
        if not raw:
          return
        position += len(raw)
        if is_blank(raw):
          report.lines += 1
          report.bytes += len(raw)
          yield ""
          break
    else:
      report.files += 1
    for raw in f:
      line_start, position = position, position + len(raw)
      if line_start >= end and is_blank(raw):
        return  # the next range's first separator
      report.lines += 1
      report.bytes += len(raw)
      if max_line_bytes and len(raw) > max_line_bytes and on_long_line is not None:
        on_long_line(path, lambda s=line_start: line_number_at(path, s), len(raw))
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:  # its line number costs a pass over the file: only now
        line = _undecodable(raw, e, errors, report,
                            f"{path}:{line_number_at(path, line_start)}")
      if line is not None:
        yield _as_original_reads(line, report)


def expand_input_files(patterns, sort: bool = False) -> List[str]:
  """Globs each pattern in turn, keeping the order the glob returns (as the original does).

  With sort, each pattern's matches are sorted (the patterns keep their order).

  Local patterns use Python's glob (directory order, like tf.io.gfile.glob on the same
  filesystem) so that a local run never imports TensorFlow; other schemes use tf.io.gfile.
  """
  if not patterns:
    raise InputError("--input_file: no input file given")
  files = []
  for pattern in patterns:
    if io.is_local(pattern):
      matches = [m for m in glob.glob(pattern) if not os.path.isdir(m)]
    else:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      try:
        matches = [m for m in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(m)]
      except tf.errors.OpError as e:
        raise InputError(f"--input_file: cannot list {pattern}: {e.message}") from None
    if not matches:
      raise InputError(f"--input_file: no file matches {pattern!r}")
    files.extend(sorted(matches) if sort else matches)
  return files


def total_size(paths: Sequence[str]) -> int:
  """Total size in bytes of the files (for progress ETAs)."""
  return sum(io.size(path) for path in paths)

def tokenize_files(paths, tokenizer, out, output_ids=False, errors="strict",
                   log_every_s=10.0):
  """Writes each input line's wordpieces to `out`; returns counts for the summary."""
  stats = {"lines": 0, "wordpieces": 0, "unknown": 0, "bytes": 0}
  unk_id = tokenizer.vocab["[UNK]"]
  total = max(1, total_size(paths))
  start = last_log = time.time()
  report = ReadReport()
  for path in paths:
    for line in iter_lines(path, errors, report):
      ids = tokenizer.tokenize_to_ids(line)
      stats["lines"] += 1
      stats["bytes"] = report.bytes
      stats["wordpieces"] += len(ids)
      stats["unknown"] += ids.count(unk_id)
      if output_ids:
        out.write(" ".join(map(str, ids)) + "\n")
      else:
        out.write(" ".join(tokenizer.convert_ids_to_tokens(ids)) + "\n")
      now = time.time()
      if now - last_log >= log_every_s:
        last_log = now
        rate = stats["bytes"] / (now - start)
        logging.info("tokenizing: %.1f/%.1f MB (%.2f MB/s, ETA %.0f s)", stats["bytes"] / 1e6,
                     total / 1e6, rate / 1e6, (total - stats["bytes"]) / rate)
  stats["seconds"] = time.time() - start
  warn_read_problems(report)
  return stats
