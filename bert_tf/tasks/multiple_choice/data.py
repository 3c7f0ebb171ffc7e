"""Multiple-choice input files, examples and records (SWAG's layout and a generic JSONL).

Two layouts, each with any fixed number (>= 2) of choices per file:

* SWAG's CSV (a header row; the columns `sent1`, `sent2`, `ending0` .. `ending<N-1>` and `label`,
  any others such as `startphrase`, `video-id`, `fold`, `gold-source` ignored): the context is
  sent1 and each choice is sent2 + " " + ending, as Hugging Face's run_swag builds them. `label`
  may be absent or empty in a predict file (SWAG's test split has none).
* JSONL, one object per line: `context` (a string), optional `question` (a string), `choices`
  (a list of strings) and `label` (the 0-based index of the right choice; optional in a predict
  file). Each choice is question + " " + choice (the choice alone without a question).

Each choice is one sequence `[CLS] context [SEP] choice [SEP]`, the pair truncated as the
original's run_classifier.py:_truncate_seq_pair truncates (tasks.pairs), padded to
max_seq_length. A record holds the example's num_choices sequences: input_ids, input_mask and
segment_ids of num_choices x max_seq_length, then label_ids and is_real_example; record_spec
gives their shapes to the input pipeline, which reads an example's sequences as rows of their own
(training.bucketing.as_sequences).

Every line is checked before anything is written; a bad one stops the run with one line naming
the file and line (MultipleChoiceFormatError).
"""

import dataclasses
import json
import re
from typing import Dict, List, Optional, Sequence, Tuple

from bert_tf import record_schema
from bert_tf.tasks import pairs
from bert_tf.tasks import text_files

LABEL_IDS, IS_REAL_EXAMPLE = "label_ids", "is_real_example"
SEQUENCE_FIELDS = (record_schema.INPUT_IDS, record_schema.INPUT_MASK, record_schema.SEGMENT_IDS)
RECORD_FIELDS = SEQUENCE_FIELDS + (LABEL_IDS, IS_REAL_EXAMPLE)
SWAG_COLUMNS = ("sent1", "sent2")
_ENDING = re.compile(r"ending(\d+)")


class MultipleChoiceFormatError(ValueError):
  """A malformed input line (the message names the file and line)."""


@dataclasses.dataclass(frozen=True)
class Example:
  """One multiple-choice example: the context, the text every choice starts with (SWAG's sent2,
  the JSONL's question; may be empty), the endings and the right one's index (None: unknown)."""
  guid: str
  context: str
  question: str
  endings: Tuple[str, ...]
  label: Optional[int] = None
  line: int = 0  # where it starts in its file

  def choice_text(self, ending: str) -> str:
    """The second segment of one choice: question + " " + ending (the ending alone without a
    question)."""
    return f"{self.question} {ending}" if self.question else ending


def _label(value, num_choices: int, where: str, labelled: Optional[bool]) -> Optional[int]:
  """A label cell / field as an index in [0, num_choices), or None when absent and allowed."""
  if value is None or (isinstance(value, str) and not value.strip()):
    if labelled:
      raise MultipleChoiceFormatError(f"{where}: no label (training and eval files need one)")
    return None
  try:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
      raise ValueError
    label = int(value.strip() if isinstance(value, str) else value)
  except (TypeError, ValueError):
    raise MultipleChoiceFormatError(f"{where}: label {value!r} is not a choice index") from None
  if not 0 <= label < num_choices:
    raise MultipleChoiceFormatError(f"{where}: label {label} is outside 0..{num_choices - 1} "
                                    f"({num_choices} choices)")
  return label


def parse_swag_csv(text: str, path: str, labelled: Optional[bool] = True) -> List[Example]:
  """SWAG's CSV layout (the module docstring); labelled: True (every row has a label), None
  (labels optional: a predict file)."""
  rows = iter(text_files.csv_rows(path, text, ",", True, MultipleChoiceFormatError))
  _, header = next(rows, (1, None))
  if not header:
    raise MultipleChoiceFormatError(f"{path}:1: empty file (SWAG's CSV has a header row)")
  columns = {name.strip(): i for i, name in enumerate(header)}
  endings = sorted(int(m.group(1)) for m in map(_ENDING.fullmatch, columns) if m)
  missing = [name for name in SWAG_COLUMNS if name not in columns]
  if endings != list(range(len(endings))) or len(endings) < 2:
    missing.append("ending0..endingN (at least two, numbered from 0)")
  if labelled and "label" not in columns:
    missing.append("label")
  if missing:
    raise MultipleChoiceFormatError(f"{path}:1: the header lacks {', '.join(missing)}")
  examples = []
  for line, row in rows:
    if not any(cell.strip() for cell in row):
      continue
    where = f"{path}:{line}"
    if len(row) != len(header):
      raise MultipleChoiceFormatError(f"{where}: {len(row)} cells, the header has {len(header)}")
    label = _label(row[columns["label"]] if "label" in columns else None, len(endings), where,
                   labelled)
    examples.append(Example(
        guid=f"{line}", context=row[columns["sent1"]], question=row[columns["sent2"]],
        endings=tuple(row[columns[f"ending{i}"]] for i in endings), label=label, line=line))
  return examples


def _string(obj, key: str, where: str, required: bool = True) -> str:
  value = obj.get(key)
  if value is None and not required:
    return ""
  if not isinstance(value, str):
    raise MultipleChoiceFormatError(
        f"{where}: {key!r} must be a string, got {'nothing' if value is None else repr(value)}")
  return value


def parse_jsonl(text: str, path: str, labelled: Optional[bool] = True) -> List[Example]:
  """The JSONL layout (the module docstring); every line holds as many choices as the first."""
  examples: List[Example] = []
  # Lines end at "\n" alone: str.splitlines would also split inside a string holding U+2028.
  for line, raw in enumerate(text.split("\n"), start=1):
    if not raw.strip():
      continue
    where = f"{path}:{line}"
    try:
      obj = json.loads(raw)
    except json.JSONDecodeError as e:
      raise MultipleChoiceFormatError(f"{where}: not JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(obj, dict):
      raise MultipleChoiceFormatError(f"{where}: a line is a JSON object with context, choices "
                                      "and label")
    context = _string(obj, "context", where)
    question = _string(obj, "question", where, required=False)
    choices = obj.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
      raise MultipleChoiceFormatError(f"{where}: 'choices' must be a list of strings")
    if len(choices) < 2:
      raise MultipleChoiceFormatError(f"{where}: {len(choices)} choices; at least 2 are needed")
    if examples and len(choices) != len(examples[0].endings):
      raise MultipleChoiceFormatError(
          f"{where}: {len(choices)} choices, but the file's first example has "
          f"{len(examples[0].endings)} (every example of a file has the same number)")
    label = _label(obj.get("label"), len(choices), where, labelled)
    guid = str(obj.get("id", line))
    if any(c in guid for c in "\t\n\r"):
      raise MultipleChoiceFormatError(f"{where}: 'id' {guid!r} holds a tab or line break, which "
                                      "the tab-separated predictions file cannot hold")
    examples.append(Example(guid=guid, context=context, question=question,
                            endings=tuple(choices), label=label, line=line))
  return examples


def is_jsonl(path: str, text: str) -> bool:
  """Whether a file is the JSONL layout: by its name (.jsonl, .json), else its first character."""
  lower = path.lower()
  if lower.endswith((".jsonl", ".json")):
    return True
  if lower.endswith((".csv", ".tsv")):
    return False
  return text.lstrip().startswith("{")


def read_examples(path: str, labelled: Optional[bool] = True) -> List[Example]:
  """Every example of a SWAG CSV or JSONL file (is_jsonl), checked; at least one.

  Raises:
    FileNotFoundError: no such file.
    MultipleChoiceFormatError: a bad line, naming the file and line.
  """
  text = text_files.read_utf8(path, MultipleChoiceFormatError, "multiple-choice file")
  parse = parse_jsonl if is_jsonl(path, text) else parse_swag_csv
  examples = parse(text, path, labelled)
  if not examples:
    raise MultipleChoiceFormatError(f"{path}: no example")
  if labelled is None and len({e.label is None for e in examples}) > 1:
    first = examples[0]
    other = next(e for e in examples if (e.label is None) != (first.label is None))
    has = "has" if other.label is not None else "has no"
    raise MultipleChoiceFormatError(
        f"{path}:{other.line}: {has} label, unlike line {first.line} (a predict file labels "
        "every example or none)")
  return examples


def num_choices_of(examples: Sequence[Example]) -> int:
  return len(examples[0].endings)


# === Features ===


def choice_features(tokens_a: Sequence[str], tokens_b: Sequence[str], tokenizer,
                    max_seq_length: int) -> Dict[str, List[int]]:
  """One choice's sequence: [CLS] A [SEP] B [SEP], the pair truncated as the original's
  _truncate_seq_pair does (to max_seq_length - 3 pieces), zero-padded."""
  len_a, len_b = pairs.truncated_pair_lengths(len(tokens_a), len(tokens_b), max_seq_length - 3)
  tokens = ["[CLS]"] + list(tokens_a[:len_a]) + ["[SEP]"]
  segments = [0] * len(tokens)
  tokens += list(tokens_b[:len_b]) + ["[SEP]"]
  segments += [1] * (len_b + 1)
  ids = tokenizer.convert_tokens_to_ids(tokens)
  pad = [0] * (max_seq_length - len(ids))
  return {record_schema.INPUT_IDS: list(ids) + pad,
          record_schema.INPUT_MASK: [1] * len(ids) + pad,
          record_schema.SEGMENT_IDS: segments + pad}


def example_features(example: Example, tokenizer, max_seq_length: int) -> Dict[str, List[int]]:
  """The record of one example: its choices' sequences one after the other (num_choices x
  max_seq_length per sequence feature), its label (0 when unknown) and is_real_example 1."""
  context = tokenizer.tokenize(example.context)
  features: Dict[str, List[int]] = {name: [] for name in SEQUENCE_FIELDS}
  for ending in example.endings:
    choice = choice_features(context, tokenizer.tokenize(example.choice_text(ending)),
                             tokenizer, max_seq_length)
    for name in SEQUENCE_FIELDS:
      features[name] += choice[name]
  features[LABEL_IDS] = [example.label or 0]
  features[IS_REAL_EXAMPLE] = [1]
  return features


def write_records(examples: Sequence[Example], tokenizer, max_seq_length: int,
                  path: str) -> int:
  """The examples' records at path (atomically: record_schema.RecordFileWriter); returns
  how many."""
  with record_schema.RecordFileWriter(path) as writer:
    for example in examples:
      writer.write(record_schema.serialize_int64_example(
          example_features(example, tokenizer, max_seq_length)))
  return writer.num_records


def record_spec(max_seq_length: int, num_choices: int) -> Dict[str, Tuple[Tuple[int, ...], str]]:
  """The record schema as {feature: (shape, dtype)} (input_pipeline.parsing_spec): the sequence
  features [num_choices, max_seq_length] (num_choices sequences per example), label_ids and
  is_real_example scalars, int64 each."""
  spec = {name: ((num_choices, max_seq_length), "int64") for name in SEQUENCE_FIELDS}
  spec.update({LABEL_IDS: ((), "int64"), IS_REAL_EXAMPLE: ((), "int64")})
  return spec
