"""Whether a teacher can teach a student: what both folders record must agree, before any step.

The soft targets are only right when the teacher reads the student's inputs as the student does
and predicts the same things in the same order. Distillation fails silently otherwise: a teacher
that was pre-trained but never fine-tuned teaches noise (TinyBERT's RTE at 30.7), and a teacher
whose labels are in another order teaches the wrong label (MNLI at ~10% until fixed). So a
teacher is refused, one line per contradiction naming both values and both files, when its:

  head kind      differs from the student's (a tagger cannot teach a classifier), or it records
                 no fine-tuned head at all (a fine-tuning student needs a fine-tuned teacher;
                 a pretraining student needs a pretrained one, not a fine-tuned one)
  regression     differs (a score cannot teach label probabilities)
  labels         differ, or are the same labels in another order
  vocab          md5 differs (the same ids would be other word pieces)
  casing         do_lower_case differs (the same text would be other word pieces)
  max_seq_length differs (the teacher was fine-tuned on other windows)

Each fact is read where model/provenance.py reads it (task_info.json, a Hugging Face
config.json and tokenizer_config.json, data_metadata.json, the vocab.txt beside the weights);
a fact one side does not record is not checked (a pretraining student's teacher that records
no head at all, an original release's folder, is left to the checkpoint reader).
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

from bert_tf import io
from bert_tf.model import provenance

TEACHER_FLAG = "--teacher"


class TeacherMismatchError(ValueError):
  """A teacher whose records contradict the student's (the message names both)."""


@dataclasses.dataclass(frozen=True)
class ModelRecord:
  """What a model folder (or a run about to write one) records that a teacher must share.

  Each value is None when it is not recorded; `sources` names the file each recorded value came
  from (by field name), for messages.
  """
  folder: str
  head: Optional[str] = None
  regression: Optional[bool] = None
  labels: Optional[Tuple[str, ...]] = None
  do_lower_case: Optional[bool] = None
  vocab_md5: Optional[str] = None
  max_seq_length: Optional[int] = None
  pair: Optional[bool] = None  # a classifier's: trained on text pairs
  version_2_with_negative: Optional[bool] = None  # SQuAD's: unanswerable questions
  document_context: Optional[bool] = None  # a tagger's: windows with the document around them
  sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def source(self, field: str) -> str:
    return self.sources.get(field, self.folder)


_TASK_FIELDS = ("regression", "labels", "do_lower_case", "vocab_md5", "max_seq_length", "pair",
                "version_2_with_negative", "document_context")


def record_of_task_info(info: Mapping[str, Any], source: str,
                        folder: Optional[str] = None) -> ModelRecord:
  """The record a task_info dict holds: a run's (before it writes it, `source` naming where it
  will) or one read from a folder.

  Args:
    info: the task_info dict (head or task_name, labels, regression, do_lower_case, vocab_md5,
      max_seq_length).
    source: the file it is (or will be) in.
    folder: the model's folder (default: source's folder).
  """
  values: Dict[str, Any] = {}
  head = provenance.head_of(info)
  if head is not None:
    values["head"] = head
  for field in _TASK_FIELDS:
    if info.get(field) is not None:
      values[field] = info[field]
  if values.get("labels") is not None:
    values["labels"] = tuple(str(label) for label in values["labels"])
  return ModelRecord(folder=folder or io.dirname(source), sources={k: source for k in values},
                     **values)


def read_record(path: str) -> ModelRecord:
  """What the folder of `path` (a folder, a checkpoint prefix or file) records: its head and
  labels (provenance.recorded_task_info), its tokenizer (provenance.recorded_tokenizer) and,
  for a run_pretraining folder, the pretraining head and max_seq_length of its data."""
  folder = provenance.folder_of(path)
  info, source = provenance.recorded_task_info(path)
  record = record_of_task_info(info or {}, source or folder, folder)
  values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
  sources = dict(record.sources)
  if record.head is None:
    _pretraining_head(folder, values, sources)
  tokenizer = provenance.recorded_tokenizer(path)
  for field, where in (("do_lower_case", "casing_source"), ("vocab_md5", "vocab_source")):
    if values[field] is None and tokenizer.get(field) is not None:
      values[field], sources[field] = tokenizer[field], tokenizer[where]
  values["sources"] = sources
  return ModelRecord(**values)


def _pretraining_head(folder: str, values: Dict[str, Any], sources: Dict[str, str]) -> None:
  """A pretrained model's head: a Hugging Face BertForPreTraining config, or a run_pretraining
  folder (its data_metadata.json, which also gives the data's max_seq_length)."""
  hf_path = io.join(folder, provenance.HF_CONFIG_FILE)
  hf = io.read_json_object(hf_path) or {}
  if (hf.get("architectures") or [None])[0] == provenance.HF_ARCHITECTURES[
      provenance.PRETRAINING]:
    values["head"], sources["head"] = provenance.PRETRAINING, hf_path
    return
  metadata_path = io.join(folder, provenance.DATA_METADATA_FILE)
  metadata = io.read_json_object(metadata_path)
  if metadata is not None:
    values["head"], sources["head"] = provenance.PRETRAINING, metadata_path
    if values["max_seq_length"] is None and metadata.get("max_seq_length") is not None:
      values["max_seq_length"] = metadata["max_seq_length"]
      sources["max_seq_length"] = metadata_path


# === The checks ===


def _both(teacher: ModelRecord, student: ModelRecord, field: str) -> str:
  return f"(teacher: {teacher.source(field)}; student: {student.source(field)})"


def _head_problem(teacher: ModelRecord, student: ModelRecord) -> Optional[str]:
  flag = f"{TEACHER_FLAG}={teacher.folder}"
  if student.head is None or teacher.head == student.head:
    return None
  if teacher.head is None and student.head == provenance.PRETRAINING:
    return None  # an original release's folder records nothing; its loader checks the head
  if teacher.head is None:
    return (f"{flag} records no head: a teacher must be a model fine-tuned on the student's "
            f"task ({student.head}, {student.source('head')}), not a pretrained encoder")
  if teacher.head == provenance.PRETRAINING:
    return (f"{flag} is a pretrained model that was never fine-tuned ({teacher.source('head')}): "
            f"a {student.head} student needs a teacher fine-tuned as a {student.head} "
            f"({student.source('head')})")
  if student.head == provenance.PRETRAINING:
    return (f"{flag} is a fine-tuned {teacher.head} ({teacher.source('head')}): pretraining "
            f"distillation ({student.source('head')}) needs a pretrained model with its masked "
            f"LM head")
  return (f"{flag} has a {teacher.head} head but the student a {student.head} head "
          f"{_both(teacher, student, 'head')}")


def _labels_problem(teacher: ModelRecord, student: ModelRecord) -> Optional[str]:
  flag = f"{TEACHER_FLAG}={teacher.folder}"
  if teacher.regression is not None and student.regression is not None and \
      teacher.regression != student.regression:
    kinds = {True: "regression", False: "classification"}
    return (f"{flag} is a {kinds[teacher.regression]} head but the student a "
            f"{kinds[student.regression]} head {_both(teacher, student, 'regression')}")
  if teacher.labels is None or student.labels is None or teacher.labels == student.labels:
    return None
  if sorted(teacher.labels) == sorted(student.labels):
    return (f"{flag} has the student's labels in another order: teacher {list(teacher.labels)}"
            f", student {list(student.labels)} {_both(teacher, student, 'labels')}; its soft "
            f"targets would teach the wrong labels")
  return (f"{flag} has the labels {list(teacher.labels)} but the student "
          f"{list(student.labels)} {_both(teacher, student, 'labels')}")


def _value_problems(teacher: ModelRecord, student: ModelRecord) -> List[str]:
  flag = f"{TEACHER_FLAG}={teacher.folder}"
  problems = []
  for field, what in (("vocab_md5", "its vocab has md5 {} but the student's {}"),
                      ("do_lower_case", "it was trained with do_lower_case={} but the student "
                                        "with do_lower_case={}"),
                      ("max_seq_length", "it was trained with max_seq_length={} but the "
                                         "student's is {}"),
                      ("version_2_with_negative", "it was trained with "
                                                  "version_2_with_negative={} but the student "
                                                  "with version_2_with_negative={}"),
                      ("document_context", "it was trained with document_context={} but the "
                                           "student with document_context={}")):
    mine, theirs = getattr(teacher, field), getattr(student, field)
    if mine is not None and theirs is not None and mine != theirs:
      problems.append(f"{flag}: {what.format(mine, theirs)} {_both(teacher, student, field)}")
  if teacher.pair is not None and student.pair is not None and teacher.pair != student.pair:
    texts = {True: "text pairs", False: "single texts"}
    problems.append(f"{flag}: it was trained on {texts[teacher.pair]} but the student trains on "
                    f"{texts[student.pair]} {_both(teacher, student, 'pair')}")
  return problems


def teacher_problems(teacher: ModelRecord, student: ModelRecord) -> List[str]:
  """Every contradiction between a teacher's record and its student's, one line each (the
  labels of a teacher of another head kind are not compared: the head is the problem)."""
  head = _head_problem(teacher, student)
  labels = None if head else _labels_problem(teacher, student)
  return [p for p in (head, labels) if p] + _value_problems(teacher, student)


def check_teacher(teacher: ModelRecord, student: ModelRecord) -> None:
  """Refuses a teacher that contradicts its student (teacher_problems).

  Raises:
    TeacherMismatchError: one line, every problem in it.
  """
  problems = teacher_problems(teacher, student)
  if problems:
    raise TeacherMismatchError("; ".join(problems))
