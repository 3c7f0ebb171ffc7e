"""The task processors of the original run_classifier.py: a task's data files -> InputExamples.

What carries over from the original release (google-research/bert, run_classifier.py):

* TSV files are read with Python's csv module, tab-delimited and with quoting off, so quote
  characters are ordinary text (MNLI and QQP contain stray quotes). Lines end at "\\n" only.
* The CoLA, MNLI, MRPC and XNLI processors read the same files and columns, skip the same header
  rows, and give the same label lists and guids. GLUE's SST-2, QQP, QNLI, RTE, WNLI and STS-B
  (a regression task) are added in the same style, plus `GenericProcessor` for any TSV, CSV or
  JSONL file. `get_processor(task_name)` finds one by name.

Deliberate differences: where the original crashed (IndexError on a short or blank row,
KeyError on an unknown label, a missing file, invalid UTF-8) this module raises an error naming
the file and line, or the label and the allowed labels. A UTF-8 byte-order mark at the start of a
file is dropped. Input that would silently change the task: whitespace around a label is stripped
(one warning per file naming the first line: "pos " would be a class of its own); an empty
label, a header row repeated inside a file (files joined with their headers) and a training file
without examples to infer the labels from are errors naming the file (and line); fields longer
than the csv module's default limit (131072 characters) are read. XNLI also reads its test set
(`xnli.test.tsv`, the dev layout); the original had none. For STS-B (regression) the label list
is None and labels are floats.

The examples are classifier_data's InputExample; classifier_data turns them into features and
records.
"""

import abc
import dataclasses
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from absl import logging

from bert_tf import io
from bert_tf.tasks import text_files
from bert_tf.tasks.classifier import data as classifier_data

# === Reading TSV, CSV and JSONL files ===


class DataFormatError(ValueError):
  """A data file that is malformed or does not match the task's layout (file and line named)."""


_FORMATS = ("tsv", "csv", "jsonl")
_EXTENSIONS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}


def _jsonl_rows(path: str, text: str) -> List[Tuple[int, Union[dict, list]]]:
  """(line number, object or array) of every non-blank line."""
  rows = []
  for number, line in enumerate(text.split("\n"), start=1):
    if not line.strip():
      continue
    try:
      value = json.loads(line)
    except json.JSONDecodeError as e:
      raise DataFormatError(f"{path}:{number}: not valid JSON: {e.msg} (column {e.colno})"
                            ) from None
    if not isinstance(value, (dict, list)):
      raise DataFormatError(f"{path}:{number}: expected a JSON object or array, found "
                            f"{type(value).__name__}")
    rows.append((number, value))
  return rows


def _read_rows(path: str, file_format: str = "tsv", delimiter: Optional[str] = None):
  """(line number, row) for every record of a TSV (original rules), CSV or JSONL file."""
  text = text_files.read_utf8(path, DataFormatError)
  if file_format == "tsv":
    return text_files.csv_rows(path, text, delimiter or "\t", False, DataFormatError)
  if file_format == "csv":
    return text_files.csv_rows(path, text, delimiter or ",", True, DataFormatError)
  if file_format == "jsonl":
    return _jsonl_rows(path, text)
  raise ValueError(f"unknown file format {file_format!r}; expected one of {_FORMATS}")


def read_tsv(input_file: str) -> List[List[str]]:
  """The rows of a tab-separated file, read as the original's `_read_tsv` does.

  csv with a tab delimiter and quoting off: every line is one row and quote characters stay in
  the text. Raises FileNotFoundError naming a missing file and DataFormatError naming the line of
  invalid UTF-8. Every "\\r" is deleted, as the original's tf.gfile reader deletes it.
  """
  return [row for _, row in _read_rows(input_file, "tsv")]


def _strip(text: str) -> str:
  """text without the whitespace around it, nor invisible zero-width spaces and byte-order
  marks (a BOM ends up inside a file when files are joined)."""
  while True:
    stripped = text.strip().strip("\u200b\ufeff")
    if stripped == text:
      return text
    text = stripped


class _LabelCleaner:
  """Strips whitespace around the labels of one file, with one warning naming the first line.

  A label such as "pos " would otherwise be a class of its own (or, with a label list, an
  unknown label): the surrounding whitespace is never part of a label.
  """

  def __init__(self, path: str):
    self.path = path
    self.count = 0
    self.first: Optional[Tuple[int, str]] = None

  def __call__(self, label: Any, line: int) -> Any:
    if not isinstance(label, str):
      return label
    stripped = _strip(label)
    if stripped != label:
      self.count += 1
      if self.first is None:
        self.first = (line, label)
    return stripped

  def report(self) -> None:
    if self.count:
      line, label = self.first
      logging.warning("%s:%d: label %r has whitespace around it; read as %r (%d label(s) of "
                      "this file were stripped)", self.path, line, label,
                      _strip(label), self.count)


def _normalised_row(row: Sequence[str]) -> List[str]:
  return [_strip(cell) for cell in row]


def _check_repeated_header(path: str, header_line: int, header: Sequence[str], line: int,
                           row: Sequence[str], normalised_header: Optional[List[str]] = None
                           ) -> None:
  """Refuses a row equal to the header (files joined with their headers): its label would
  become a class of its own, or an unknown label."""
  if normalised_header is None:
    normalised_header = _normalised_row(header)
  # Cheap tests first: this runs for every row of large files.
  if len(row) != len(header) or (row and normalised_header[0] not in row[0]):
    return
  if _normalised_row(row) == normalised_header:
    raise DataFormatError(f"{path}:{line}: the header row (line {header_line}) is repeated "
                          f"here: {_preview(list(row))}; were files joined with their headers? "
                          "Remove the extra header lines")


def _preview(row: Any, limit: int = 80) -> str:
  text = "\t".join(row) if isinstance(row, list) and all(isinstance(c, str) for c in row) \
      else json.dumps(row, ensure_ascii=False)
  return repr(text if len(text) <= limit else text[:limit] + "...")


# === Processors ===


class DataProcessor(abc.ABC):
  """Reads a task's train/dev/test examples (the original's interface, as an abstract class).

  Subclasses give `get_examples(data_dir, split)` and `get_labels()`; `splits` lists the split
  names `get_examples` accepts. `is_regression` is True for real-valued labels, in which case
  `get_labels()` returns None.
  """

  name = "task"
  splits: Tuple[str, ...] = ("train", "dev", "test")
  is_regression = False

  @abc.abstractmethod
  def get_examples(self, data_dir: str, split: str) -> List[classifier_data.InputExample]:
    """The examples of one split (one of `splits`) read from data_dir."""

  def get_train_examples(self, data_dir: str) -> List[classifier_data.InputExample]:
    return self.get_examples(data_dir, "train")

  def get_dev_examples(self, data_dir: str) -> List[classifier_data.InputExample]:
    return self.get_examples(data_dir, "dev")

  def get_test_examples(self, data_dir: str) -> List[classifier_data.InputExample]:
    return self.get_examples(data_dir, "test")

  @abc.abstractmethod
  def get_labels(self) -> Optional[List[str]]:
    """The label list (its order gives the label ids); None for a regression task."""

  def source(self, data_dir: str, split: str) -> str:
    """Where a split's examples are read from, for messages (a file, or data_dir)."""
    del split
    return data_dir

  @classmethod
  def _read_tsv(cls, input_file: str) -> List[List[str]]:
    """The original's helper name, kept for subclasses written against the original."""
    return read_tsv(input_file)

  def _check_split(self, split: str) -> None:
    if split not in self.splits:
      raise ValueError(f"{self.name} has no split {split!r}; its splits are {list(self.splits)}")

  def _check_label(self, label: Any, path: str, line: int,
                   labels: Optional[Sequence[str]], allowed: Optional[frozenset] = None) -> Any:
    """The label as stored in an example (float for regression); errors name file and line.

    `labels` is the label list (None for regression); `allowed`, its set, saves rebuilding it
    for every row.
    """
    if labels is None:
      try:
        return float(label)
      except (TypeError, ValueError):
        raise DataFormatError(f"{path}:{line}: label {label!r} is not a number "
                              f"({self.name} is a regression task)") from None
    if label not in (allowed if allowed is not None else labels):
      raise DataFormatError(f"{path}:{line}: unknown label {label!r}; the {self.name} labels "
                            f"are {list(labels)}")
    return label


@dataclasses.dataclass(frozen=True)
class SplitLayout:
  """Where one split's examples are in a TSV file (column indexes may be negative, from the end).

  Attributes:
    file_name: the file, relative to data_dir.
    guid_prefix: guids are "<guid_prefix>-<guid_column's value>", or "<guid_prefix>-<i>" with i
      the index of the row among all rows read (the header is row 0 when there is one).
    text_a, text_b: text columns; text_b None for single-sequence tasks.
    label: label column, or None for a constant label (the task's first label, as the original's
      test sets; 0.0 for regression).
    guid_column: see guid_prefix.
    skip_header: whether the first row is a header.
    label_rewrites: labels replaced as read (XNLI's translated training sets say
      "contradictory").
    keep_column, keep_value: keep only rows whose keep_column equals keep_value (XNLI's dev set
      holds every language); skipped rows still count for the guid index.
  """
  file_name: str
  guid_prefix: str
  text_a: int
  text_b: Optional[int] = None
  label: Optional[int] = None
  guid_column: Optional[int] = None
  skip_header: bool = True
  label_rewrites: Tuple[Tuple[str, str], ...] = ()
  keep_column: Optional[int] = None
  keep_value: Optional[str] = None

  def columns_needed(self) -> int:
    used = [c for c in (self.text_a, self.text_b, self.label, self.guid_column) if c is not None]
    return max([c + 1 if c >= 0 else -c for c in used] + [1])


class TsvTaskProcessor(DataProcessor):
  """A processor defined by its label list and one SplitLayout per split."""

  labels: Optional[Tuple[str, ...]] = None
  layouts: Mapping[str, SplitLayout] = {}

  @property
  def splits(self) -> Tuple[str, ...]:
    return tuple(self.layouts)

  def get_labels(self) -> Optional[List[str]]:
    return None if self.labels is None else list(self.labels)

  def source(self, data_dir: str, split: str) -> str:
    return os.path.join(data_dir, self.layouts[split].file_name)

  def get_examples(self, data_dir: str, split: str) -> List[classifier_data.InputExample]:
    self._check_split(split)
    layout = self.layouts[split]
    path = self.source(data_dir, split)
    if not io.exists(path):
      raise FileNotFoundError(
          f"{path}: file not found (the {self.name} processor reads its {split} examples from "
          f"{layout.file_name} in data_dir)")
    rows = _read_rows(path, "tsv")
    needed = layout.columns_needed()
    rewrites = dict(layout.label_rewrites)
    labels = self.get_labels()
    allowed = None if labels is None else frozenset(labels)
    constant_label = 0.0 if labels is None else labels[0]
    clean_label = _LabelCleaner(path)
    header = _normalised_row(rows[0][1]) if rows and layout.skip_header else None
    examples = []
    for i, (line, row) in enumerate(rows):
      if i == 0 and layout.skip_header:
        continue
      if header is not None:
        _check_repeated_header(path, rows[0][0], rows[0][1], line, row, header)
      if layout.keep_column is not None:
        if len(row) <= layout.keep_column:
          self._on_short_row(path, line, row, layout.keep_column + 1, split)
          continue
        if row[layout.keep_column] != layout.keep_value:
          continue
      if len(row) < needed:
        self._on_short_row(path, line, row, needed, split)
        continue  # reached only when the subclass chose to skip the row
      if layout.label is None:
        label = constant_label
      else:
        label = row[layout.label] if labels is None else clean_label(row[layout.label], line)
        label = self._check_label(rewrites.get(label, label), path, line, labels, allowed)
      guid_part = i if layout.guid_column is None else row[layout.guid_column]
      examples.append(classifier_data.InputExample(
          guid=f"{layout.guid_prefix}-{guid_part}", text_a=row[layout.text_a],
          text_b=None if layout.text_b is None else row[layout.text_b], label=label))
    clean_label.report()
    return examples

  def _on_short_row(self, path: str, line: int, row: List[str], needed: int, split: str):
    """A row with too few columns: an error naming the file and line (subclasses may skip)."""
    raise DataFormatError(
        f"{path}:{line}: {len(row)} tab-separated column(s), but the {self.name} {split} layout "
        f"needs at least {needed}; the line is {_preview(row)}")


# --- The original's four processors ---


class ColaProcessor(TsvTaskProcessor):
  """CoLA (GLUE). train/dev: no header; columns source, label, original label, sentence.

  test.tsv has a header (index, sentence). guids "<set>-<i>": train and dev start at 0, test at 1.
  """
  name = "cola"
  labels = ("0", "1")
  layouts = {
      "train": SplitLayout("train.tsv", "train", text_a=3, label=1, skip_header=False),
      "dev": SplitLayout("dev.tsv", "dev", text_a=3, label=1, skip_header=False),
      "test": SplitLayout("test.tsv", "test", text_a=1),
  }


class MnliProcessor(TsvTaskProcessor):
  """MultiNLI (GLUE). Premise col 8, hypothesis col 9, gold label in the last column.

  guids "<set>-<col 0>" with set "train", "dev_matched", "test" (as the original). Added: the
  mismatched sets as the splits "dev_mismatched" and "test_mismatched".
  """
  name = "mnli"
  labels = ("contradiction", "entailment", "neutral")
  layouts = {
      "train": SplitLayout("train.tsv", "train", text_a=8, text_b=9, label=-1, guid_column=0),
      "dev": SplitLayout("dev_matched.tsv", "dev_matched", text_a=8, text_b=9, label=-1,
                         guid_column=0),
      "test": SplitLayout("test_matched.tsv", "test", text_a=8, text_b=9, guid_column=0),
      "dev_mismatched": SplitLayout("dev_mismatched.tsv", "dev_mismatched", text_a=8, text_b=9,
                                    label=-1, guid_column=0),
      "test_mismatched": SplitLayout("test_mismatched.tsv", "test_mismatched", text_a=8,
                                     text_b=9, guid_column=0),
  }

  def get_dev_mismatched_examples(self, data_dir: str) -> List[classifier_data.InputExample]:
    return self.get_examples(data_dir, "dev_mismatched")

  def get_test_mismatched_examples(self, data_dir: str) -> List[classifier_data.InputExample]:
    return self.get_examples(data_dir, "test_mismatched")


class MrpcProcessor(TsvTaskProcessor):
  """MRPC (GLUE). Header skipped; Quality (label) col 0, #1 String col 3, #2 String col 4.

  guids "<set>-<i>", so the first example is "<set>-1"; test labels are the constant "0".
  """
  name = "mrpc"
  labels = ("0", "1")
  layouts = {
      "train": SplitLayout("train.tsv", "train", text_a=3, text_b=4, label=0),
      "dev": SplitLayout("dev.tsv", "dev", text_a=3, text_b=4, label=0),
      "test": SplitLayout("test.tsv", "test", text_a=3, text_b=4),
  }


class XnliProcessor(TsvTaskProcessor):
  """XNLI for one language (the original hard-coded "zh").

  train: multinli/multinli.train.<language>.tsv, header skipped, premise col 0, hypothesis col 1,
  label col 2 with "contradictory" read as "contradiction"; guids "train-<i>".
  dev: xnli.dev.tsv, header skipped, rows whose col 0 is the language; premise col 6, hypothesis
  col 7, label col 1; guids "dev-<i>" with i counted before filtering (so they have gaps).
  test (not in the original): xnli.test.tsv, read like dev.
  """
  name = "xnli"
  labels = ("contradiction", "entailment", "neutral")

  def __init__(self, language: str = "zh"):
    self.language = language
    self.layouts = {
        "train": SplitLayout(os.path.join("multinli", f"multinli.train.{language}.tsv"), "train",
                             text_a=0, text_b=1, label=2,
                             label_rewrites=(("contradictory", "contradiction"),)),
        "dev": SplitLayout("xnli.dev.tsv", "dev", text_a=6, text_b=7, label=1,
                           keep_column=0, keep_value=language),
        "test": SplitLayout("xnli.test.tsv", "test", text_a=6, text_b=7, label=1,
                            keep_column=0, keep_value=language),
    }


# --- The rest of GLUE ---
#
# Assumed layouts of the files in GLUE's download (glue_data/<task>/; the column orders are the
# ones Hugging Face's and Model Garden's TSV processors read). Every file has a header row.
#   SST-2  train/dev: sentence, label                      test: index, sentence
#   QQP    train/dev: id, qid1, qid2, question1, question2, is_duplicate
#                                                          test: id, question1, question2
#   QNLI   train/dev: index, question, sentence, label     test: index, question, sentence
#   RTE    train/dev: index, sentence1, sentence2, label   test: index, sentence1, sentence2
#   WNLI   train/dev: index, sentence1, sentence2, label   test: index, sentence1, sentence2
#   STS-B  train/dev: index, genre, filename, year, old_index, source1, source2, sentence1,
#          sentence2, score                                test: the same without score
# guids are "<set>-<col 0>" (the index or id, which GLUE's submission files use), except SST-2's
# train/dev, which have no id column: "<set>-<i>" there and, for consistency, in its test set.
# Test labels are the task's first label (0.0 for STS-B), as the original did for its tasks.
# QQP: some copies of train.tsv have rows with missing fields; Hugging Face's processor skips
# them silently. Here they are an error unless QqpProcessor(skip_short_rows=True), which skips
# them with a warning naming each line.


class Sst2Processor(TsvTaskProcessor):
  """SST-2 (GLUE): single sentences, labels "0" (negative) and "1" (positive)."""
  name = "sst-2"
  labels = ("0", "1")
  layouts = {
      "train": SplitLayout("train.tsv", "train", text_a=0, label=1),
      "dev": SplitLayout("dev.tsv", "dev", text_a=0, label=1),
      "test": SplitLayout("test.tsv", "test", text_a=1),
  }


class QqpProcessor(TsvTaskProcessor):
  """QQP (GLUE): question pairs, labels "0" and "1" (is_duplicate)."""
  name = "qqp"
  labels = ("0", "1")
  layouts = {
      "train": SplitLayout("train.tsv", "train", text_a=3, text_b=4, label=5, guid_column=0),
      "dev": SplitLayout("dev.tsv", "dev", text_a=3, text_b=4, label=5, guid_column=0),
      "test": SplitLayout("test.tsv", "test", text_a=1, text_b=2, guid_column=0),
  }

  def __init__(self, skip_short_rows: bool = False):
    self.skip_short_rows = skip_short_rows

  def get_examples(self, data_dir: str, split: str) -> List[classifier_data.InputExample]:
    self._skipped = []
    examples = super().get_examples(data_dir, split)
    if self._skipped:
      logging.warning("qqp %s: skipped %d row(s) with too few columns: %s%s", split,
                      len(self._skipped), ", ".join(self._skipped[:20]),
                      ", ..." if len(self._skipped) > 20 else "")
    return examples

  def _on_short_row(self, path, line, row, needed, split):
    if not self.skip_short_rows:
      super()._on_short_row(path, line, row, needed, split)
    self._skipped.append(f"{path}:{line}")


def _glue_pair_layouts():
  """train/dev: index, sentence1 (or question), sentence2, ..., label (last); test: no label."""
  return {split: SplitLayout(f"{split}.tsv", split, text_a=1, text_b=2,
                             label=None if split == "test" else -1, guid_column=0)
          for split in ("train", "dev", "test")}


class QnliProcessor(TsvTaskProcessor):
  """QNLI (GLUE): question/sentence pairs, labels "entailment" and "not_entailment"."""
  name = "qnli"
  labels = ("entailment", "not_entailment")
  layouts = _glue_pair_layouts()


class RteProcessor(TsvTaskProcessor):
  """RTE (GLUE): sentence pairs, labels "entailment" and "not_entailment"."""
  name = "rte"
  labels = ("entailment", "not_entailment")
  layouts = _glue_pair_layouts()


class WnliProcessor(TsvTaskProcessor):
  """WNLI (GLUE): sentence pairs, labels "0" and "1"."""
  name = "wnli"
  labels = ("0", "1")
  layouts = _glue_pair_layouts()


class StsbProcessor(TsvTaskProcessor):
  """STS-B (GLUE): regression on sentence pairs, a similarity score in [0, 5] (float labels)."""
  name = "sts-b"
  is_regression = True
  labels = None
  layouts = {
      "train": SplitLayout("train.tsv", "train", text_a=7, text_b=8, label=-1, guid_column=0),
      "dev": SplitLayout("dev.tsv", "dev", text_a=7, text_b=8, label=-1, guid_column=0),
      "test": SplitLayout("test.tsv", "test", text_a=7, text_b=8, guid_column=0),
  }


# --- Any TSV, CSV or JSONL file ---

Column = Union[int, str]
_MISSING = object()


class GenericProcessor(DataProcessor):
  """Examples from any TSV, CSV or JSONL files, with the columns named by the caller.

  Formats (from each file's extension unless `file_format` is given): ".tsv" the original's TSV
  rules (tabs, quotes kept as text); ".csv" standard CSV (quoted fields may hold commas and
  newlines); ".jsonl"/".json" one JSON object (columns by key) or array (by index) per line,
  blank lines ignored.

  Size: thirteen parameters, one per run_classifier flag that describes the files (--text_a_column,
  --label_column, --train_file, ...).

  Args:
    text_a_column: the first text: a column name (needs a header, or JSONL objects) or a 0-based
      index (negative counts from the end).
    text_b_column: the second text, or None for single-sequence tasks. A JSON null is None.
    label_column: the label. Required in train and dev; a test file may lack it (then every test
      label is the first label, or 0.0 for regression, as the original's test sets).
    has_header: whether a TSV/CSV file's first row names the columns (default: True when any
      column is given by name). The header counts as row 0 of the guids.
    label_list: the labels in id order; default: the training file's distinct labels, sorted
      as strings.
    is_regression: real-valued labels (floats); get_labels() is then None.
    file_format: "tsv", "csv" or "jsonl" for every file, instead of the extension.
    delimiter: overrides the tab (TSV) or comma (CSV).
    train_file, dev_file, test_file: file names relative to data_dir (or absolute paths).
    guid_column: guids are "<split>-<this column's value>"; default "<split>-<i>" with i the
      index of the row among all rows read, as the original.
    name: the task name used in messages.
  """

  def __init__(self, text_a_column: Column, text_b_column: Optional[Column] = None,
               label_column: Optional[Column] = None, *, has_header: Optional[bool] = None,
               label_list: Optional[Sequence[str]] = None, is_regression: bool = False,
               file_format: Optional[str] = None, delimiter: Optional[str] = None,
               train_file: str = "train.tsv", dev_file: str = "dev.tsv",
               test_file: str = "test.tsv", guid_column: Optional[Column] = None,
               name: str = "generic"):
    for what, column in (("text_a_column", text_a_column), ("text_b_column", text_b_column),
                         ("label_column", label_column), ("guid_column", guid_column)):
      if column is not None and (isinstance(column, bool) or not isinstance(column, (int, str))):
        raise TypeError(f"{what} must be a column name (str) or index (int), got {column!r}")
    if text_a_column is None:
      raise ValueError("text_a_column is required")
    if file_format is not None and file_format not in _FORMATS:
      raise ValueError(f"file_format={file_format!r}; expected one of {_FORMATS}")
    if is_regression and label_list is not None:
      raise ValueError("a regression task has no label_list")
    if label_list is not None:
      label_list = [str(label) for label in label_list]
      if not label_list or len(set(label_list)) != len(label_list):
        raise ValueError(f"label_list must be non-empty without repeats, got {label_list}")
    self.text_a_column = text_a_column
    self.text_b_column = text_b_column
    self.label_column = label_column
    self.guid_column = guid_column
    by_name = any(isinstance(c, str) for c in (text_a_column, text_b_column, label_column,
                                                guid_column))
    # For TSV/CSV files; JSONL lines name their own keys (an explicit True is refused there).
    self.has_header = by_name if has_header is None else has_header
    self._header_requested = bool(has_header)
    self.label_list = label_list
    self.is_regression = is_regression
    self.file_format = file_format
    self.delimiter = delimiter
    self.files = {"train": train_file, "dev": dev_file, "test": test_file}
    self.name = name
    self._data_dir: Optional[str] = None
    self._inferred: Dict[str, List[str]] = {}

  def get_labels(self, data_dir: Optional[str] = None) -> Optional[List[str]]:
    """The label list; inferred from data_dir's training file (or the last data_dir read)."""
    if self.is_regression:
      return None
    if self.label_list is not None:
      return list(self.label_list)
    data_dir = data_dir if data_dir is not None else self._data_dir
    if data_dir is None:
      raise ValueError(f"{self.name}: no label_list was given, so the labels come from the "
                       "training file; call get_labels(data_dir) or read examples first")
    path = os.path.join(data_dir, self.files["train"])
    if path not in self._inferred:
      self._inferred[path] = self._infer_labels(path, self._records(data_dir, "train"))
    return list(self._inferred[path])

  def _infer_labels(self, path: str, records) -> List[str]:
    """The distinct labels of the training records, sorted; refuses a file without any."""
    labels = sorted({label for _, _, _, _, label in records})
    has_header_row = self.has_header and self._format_of(path) != "jsonl"
    if not labels:
      raise DataFormatError(f"{path}: no training example to learn the labels from (the file "
                            f"has {'only a header row' if has_header_row else 'no row'}); "
                            f"add examples or give the label list")
    return labels

  def get_examples(self, data_dir: str, split: str) -> List[classifier_data.InputExample]:
    self._check_split(split)
    self._data_dir = data_dir
    path = os.path.join(data_dir, self.files[split])
    records = self._records(data_dir, split)
    if split == "train" and not self.is_regression and self.label_list is None:
      self._inferred[path] = self._infer_labels(path, records)
    labels = self.get_labels(data_dir)
    allowed = None if labels is None else frozenset(labels)
    constant_label = 0.0 if labels is None else labels[0]
    examples = []
    for line, guid, text_a, text_b, label in records:
      label = constant_label if label is _MISSING else \
          self._check_label(label, path, line, labels, allowed)
      examples.append(classifier_data.InputExample(guid=f"{split}-{guid}", text_a=text_a,
                                                   text_b=text_b, label=label))
    return examples

  def source(self, data_dir: str, split: str) -> str:
    return os.path.join(data_dir, self.files[split])

  def _format_of(self, path: str) -> str:
    if self.file_format:
      return self.file_format
    extension = os.path.splitext(path)[1].lower()
    if extension not in _EXTENSIONS:
      raise ValueError(f"{path}: cannot tell the format from the extension {extension!r}; "
                       f"pass file_format (one of {_FORMATS})")
    return _EXTENSIONS[extension]

  def _records(self, data_dir: str, split: str) -> List[Tuple[int, str, str, Optional[str], Any]]:
    """(line, guid suffix, text_a, text_b, raw label or _MISSING) for every example row."""
    if self.label_column is None and split != "test":
      raise ValueError(f"{self.name}: label_column is not set, so there are no {split} labels")
    path = self.source(data_dir, split)
    if not io.exists(path):
      raise FileNotFoundError(f"{path}: file not found (the {self.name} {split} file)")
    file_format = self._format_of(path)
    if file_format == "jsonl" and self._header_requested:
      raise ValueError(f"{path}: JSONL files have no header; name columns by key instead")
    rows = _read_rows(path, file_format, self.delimiter)
    columns = {"text_a": self.text_a_column, "text_b": self.text_b_column,
               "label": self.label_column, "guid": self.guid_column}
    label_optional = split == "test"
    start = 0
    if file_format != "jsonl":
      if self.has_header:
        if not rows:
          raise DataFormatError(f"{path}: empty file, expected a header row")
        header_line, header = rows[0]
        start = 1
        for role, column in columns.items():
          if isinstance(column, str):
            if column in header:
              columns[role] = header.index(column)
            elif role == "label" and label_optional:
              columns[role] = None
            else:
              raise DataFormatError(f"{path}:{header_line}: no column {column!r} in the header "
                                    f"{header}")
      else:
        named = [c for c in columns.values() if isinstance(c, str)]
        if named:
          raise ValueError(f"{path}: columns given by name ({named}) need has_header=True")
    records = []
    clean_label = _LabelCleaner(path)
    header = _normalised_row(rows[0][1]) if start else None
    for i in range(start, len(rows)):
      line, row = rows[i]
      if header is not None:
        _check_repeated_header(path, rows[0][0], rows[0][1], line, row, header)
      values = {}
      for role, column in columns.items():
        if column is None:
          values[role] = _MISSING
          continue
        value = _cell(row, column)
        if value is _MISSING and not (role == "label" and label_optional):
          self._missing_cell(path, line, row, role, column)
        values[role] = value
      guid = i if values["guid"] is _MISSING else values["guid"]
      text_a = _text(values["text_a"], path, line, "text_a", allow_none=False)
      text_b = None if values["text_b"] is _MISSING else \
          _text(values["text_b"], path, line, "text_b", allow_none=True)
      label = values["label"]
      if label is not _MISSING and not isinstance(label, str) and not self.is_regression:
        label = json.dumps(label)  # JSON numbers and booleans: 1 -> "1", true -> "true"
      if label is not _MISSING and not self.is_regression:
        label = clean_label(label, line)
        if label == "":
          raise DataFormatError(f"{path}:{line}: empty label (column {self.label_column!r}); the "
                                f"line is {_preview(row)}")
      records.append((line, guid if isinstance(guid, (str, int)) else json.dumps(guid),
                      text_a, text_b, label))
    clean_label.report()
    return records

  def _missing_cell(self, path, line, row, role, column):
    if isinstance(row, dict):
      raise DataFormatError(f"{path}:{line}: no key {column!r} ({role}); the keys are "
                            f"{list(row)}")
    if isinstance(column, str):
      raise DataFormatError(f"{path}:{line}: {role} column {column!r} is given by name, but the "
                            f"line is a JSON array")
    raise DataFormatError(f"{path}:{line}: {len(row)} column(s), but the {role} column is "
                          f"{column}; the line is {_preview(row)}")


def _cell(row: Union[list, dict], column: Column) -> Any:
  if isinstance(row, dict):
    return row.get(column, _MISSING) if isinstance(column, str) else _MISSING
  if isinstance(column, str):
    return _MISSING
  return row[column] if -len(row) <= column < len(row) else _MISSING


def _text(value: Any, path: str, line: int, role: str, allow_none: bool) -> Optional[str]:
  if isinstance(value, str) or (value is None and allow_none):
    return value
  raise DataFormatError(f"{path}:{line}: {role} is {json.dumps(value)}, expected a string")


# === Task names ===

# Keyed by lower-case task name: the original's four, then the rest of GLUE.
PROCESSORS = {
    "cola": ColaProcessor,
    "mnli": MnliProcessor,
    "mrpc": MrpcProcessor,
    "xnli": XnliProcessor,
    "sst-2": Sst2Processor,
    "sst2": Sst2Processor,
    "qqp": QqpProcessor,
    "qnli": QnliProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "sts-b": StsbProcessor,
    "stsb": StsbProcessor,
}


def get_processor(task_name: str, **kwargs) -> DataProcessor:
  """A processor by task name (case-insensitive), e.g. get_processor("XNLI", language="de")."""
  key = task_name.lower()
  if key not in PROCESSORS:
    raise ValueError(f"Task not found: {task_name!r}; known tasks: {sorted(PROCESSORS)}")
  return PROCESSORS[key](**kwargs)
