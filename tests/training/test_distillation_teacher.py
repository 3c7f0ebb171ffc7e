"""Tests of bert_tf.training.distillation.teacher: teachers refused by what real folders record.

The folders are written by the library's own writers: a fine-tuning run's record
(provenance.write_task_info and record_vocab, as tasks/run_folder.record_run_info writes it), a
Hugging Face folder (conversion.write_converted of a tiny model) and a run_pretraining folder's
data_metadata.json (record_schema.write_metadata).
"""

import os

import pytest

from bert_tf import record_schema
from bert_tf.model import conversion
from bert_tf.model import provenance
from bert_tf.training.distillation import teacher as teacher_lib
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

LABELS = ["contradiction", "entailment", "neutral"]


def _vocab(tmp_path, name="vocab.txt", extra=()):
  path = str(tmp_path / name)
  helpers.write_vocab(path)
  if extra:
    with open(path, "a") as f:
      f.write("\n".join(extra) + "\n")
  return path


def _info(head=classifier_head.CLASSIFIER, labels=LABELS, vocab_md5=helpers.TINY_VOCAB_MD5,
          **changes):
  info = dict(task_name="mnli" if head == classifier_head.CLASSIFIER else head, head=head,
              labels=labels, regression=False, do_lower_case=True, vocab_md5=vocab_md5,
              max_seq_length=16)
  if head != classifier_head.CLASSIFIER:
    info.pop("regression")
  info.update(changes)
  return {k: v for k, v in info.items() if v is not None}


def _run_folder(tmp_path, name, vocab, **info_changes):
  """A fine-tuning run's folder as record_run_info leaves it: task_info.json and vocab.txt."""
  folder = str(tmp_path / name)
  os.makedirs(folder)
  provenance.write_task_info(folder, _info(**info_changes))
  provenance.record_vocab(folder, vocab)
  return folder


def _student(tmp_path, vocab, **info_changes):
  """The student's record as its run has it before writing (the task_info dict it will write)."""
  folder = str(tmp_path / "student")
  info_changes.setdefault("vocab_md5", record_schema.vocab_checksum(vocab))
  return teacher_lib.record_of_task_info(_info(**info_changes),
                                         os.path.join(folder, provenance.TASK_INFO_FILE))


def _problems(teacher_path, student):
  return teacher_lib.teacher_problems(teacher_lib.read_record(teacher_path), student)


def test_a_matching_teacher_passes(tmp_path):
  vocab = _vocab(tmp_path)
  teacher = _run_folder(tmp_path, "teacher", vocab)
  student = _student(tmp_path, vocab)
  assert _problems(teacher, student) == []
  teacher_lib.check_teacher(teacher_lib.read_record(teacher), student)
  # A checkpoint path inside the folder reads the same record.
  assert _problems(os.path.join(teacher, "model.ckpt-10"), student) == []
  # The student's own folder, once written, reads back as the same record.
  written = _run_folder(tmp_path, "student_run", vocab)
  record = teacher_lib.read_record(written)
  assert (record.head, record.labels, record.do_lower_case, record.vocab_md5,
          record.max_seq_length, record.regression) == (
              "classifier", tuple(LABELS), True, helpers.TINY_VOCAB_MD5, 16, False)
  assert _problems(teacher, record) == []


def test_labels_in_another_order_are_refused_naming_both(tmp_path):
  vocab = _vocab(tmp_path)
  swapped = ["entailment", "contradiction", "neutral"]
  teacher = _run_folder(tmp_path, "teacher", vocab, labels=swapped)
  student = _student(tmp_path, vocab)
  with pytest.raises(teacher_lib.TeacherMismatchError) as error:
    teacher_lib.check_teacher(teacher_lib.read_record(teacher), student)
  message = str(error.value)
  assert message == (
      f"--teacher={teacher} has the student's labels in another order: teacher {swapped}, "
      f"student {LABELS} (teacher: {teacher}/task_info.json; student: "
      f"{tmp_path}/student/task_info.json); its soft targets would teach the wrong labels")


def test_other_labels_and_regression(tmp_path):
  vocab = _vocab(tmp_path)
  other = _run_folder(tmp_path, "other", vocab, labels=["neg", "pos"])
  assert _problems(other, _student(tmp_path, vocab)) == [
      f"--teacher={other} has the labels ['neg', 'pos'] but the student {LABELS} (teacher: "
      f"{other}/task_info.json; student: {tmp_path}/student/task_info.json)"]
  scorer = _run_folder(tmp_path, "scorer", vocab, labels=None, regression=True)
  assert _problems(scorer, _student(tmp_path, vocab)) == [
      f"--teacher={scorer} is a regression head but the student a classification head "
      f"(teacher: {scorer}/task_info.json; student: {tmp_path}/student/task_info.json)"]
  assert _problems(scorer, _student(tmp_path, vocab, labels=None, regression=True)) == []


def test_a_teacher_of_text_pairs_does_not_teach_single_texts(tmp_path):
  vocab = _vocab(tmp_path)
  pairs = _run_folder(tmp_path, "pairs", vocab, pair=True)
  assert _problems(pairs, _student(tmp_path, vocab, pair=False)) == [
      f"--teacher={pairs}: it was trained on text pairs but the student trains on single texts "
      f"(teacher: {pairs}/task_info.json; student: {tmp_path}/student/task_info.json)"]
  assert _problems(pairs, _student(tmp_path, vocab, pair=True)) == []
  assert _problems(pairs, _student(tmp_path, vocab)) == []  # a record without it: unchecked


def test_a_teacher_of_another_task_setup_is_refused(tmp_path):
  """SQuAD 1.1 does not teach 2.0 (the teacher never learnt to abstain), a tagger trained on
  sentences alone does not teach one that reads the document around them, and the reverse."""
  vocab = _vocab(tmp_path)
  for head, field, labels in (("squad", "version_2_with_negative", None),
                              (tagging_head.TAGGER, "document_context", ["O", "B-X"])):
    teacher = _run_folder(tmp_path, f"{field}_teacher", vocab, head=head, labels=labels,
                          **{field: False})
    student = _student(tmp_path, vocab, head=head, labels=labels, **{field: True})
    assert _problems(teacher, student) == [
        f"--teacher={teacher}: it was trained with {field}=False but the student with "
        f"{field}=True (teacher: {teacher}/task_info.json; student: "
        f"{tmp_path}/student/task_info.json)"]
    assert _problems(teacher, _student(tmp_path, vocab, head=head, labels=labels,
                                       **{field: False})) == []


def test_vocab_casing_and_length_mismatches_are_one_line_each(tmp_path):
  vocab = _vocab(tmp_path)
  other_vocab = _vocab(tmp_path, "other_vocab.txt", extra=["w64"])
  other_md5 = record_schema.vocab_checksum(other_vocab)
  teacher = _run_folder(tmp_path, "teacher", other_vocab, vocab_md5=other_md5,
                        do_lower_case=False, max_seq_length=128)
  problems = _problems(teacher, _student(tmp_path, vocab))
  both = f"(teacher: {teacher}/task_info.json; student: {tmp_path}/student/task_info.json)"
  assert problems == [
      f"--teacher={teacher}: its vocab has md5 {other_md5} but the student's "
      f"{helpers.TINY_VOCAB_MD5} {both}",
      f"--teacher={teacher}: it was trained with do_lower_case=False but the student with "
      f"do_lower_case=True {both}",
      f"--teacher={teacher}: it was trained with max_seq_length=128 but the student's is 16 "
      f"{both}"]
  with pytest.raises(teacher_lib.TeacherMismatchError) as error:
    teacher_lib.check_teacher(teacher_lib.read_record(teacher), _student(tmp_path, vocab))
  assert str(error.value) == "; ".join(problems) and "\n" not in str(error.value)


def test_the_vocab_beside_the_teacher_counts_when_task_info_has_no_md5(tmp_path):
  other_vocab = _vocab(tmp_path, "other_vocab.txt", extra=["w64", "w65"])
  teacher = _run_folder(tmp_path, "teacher", other_vocab, vocab_md5=None)
  problems = _problems(teacher, _student(tmp_path, _vocab(tmp_path)))
  assert len(problems) == 1
  assert problems[0].startswith(
      f"--teacher={teacher}: its vocab has md5 {record_schema.vocab_checksum(other_vocab)} but "
      f"the student's {helpers.TINY_VOCAB_MD5} (teacher: {teacher}/vocab.txt; student: ")


def test_a_teacher_of_another_task_is_refused(tmp_path):
  vocab = _vocab(tmp_path)
  tagger = _run_folder(tmp_path, "tagger", vocab, head=tagging_head.TAGGER, labels=["O", "B-X"])
  assert _problems(tagger, _student(tmp_path, vocab)) == [
      f"--teacher={tagger} has a tagger head but the student a classifier head (teacher: "
      f"{tagger}/task_info.json; student: {tmp_path}/student/task_info.json)"]


def _pretraining_folder(tmp_path, name="pretrained"):
  """A run_pretraining folder: its data's metadata as data_metadata.json, and its vocab."""
  folder = tmp_path / name
  folder.mkdir()
  metadata = record_schema.make_metadata(
      max_seq_length=16, max_predictions_per_seq=3, use_v2_feature_names=False, vocab_size=64,
      vocab_md5=helpers.TINY_VOCAB_MD5, do_lower_case=True, do_whole_word_mask=False, flags={},
      counts={"instances": 1}, program_version="tests")
  record_schema.write_metadata(str(folder / provenance.DATA_METADATA_FILE), metadata)
  provenance.record_vocab(str(folder), _vocab(tmp_path, f"{name}_vocab.txt"))
  return str(folder)


def test_a_teacher_never_fine_tuned_is_refused(tmp_path):
  pretrained = _pretraining_folder(tmp_path)
  assert _problems(pretrained, _student(tmp_path, _vocab(tmp_path))) == [
      f"--teacher={pretrained} is a pretrained model that was never fine-tuned "
      f"({pretrained}/data_metadata.json): a classifier student needs a teacher fine-tuned as "
      f"a classifier ({tmp_path}/student/task_info.json)"]
  # ... and it is what pretraining distillation wants, unlike a fine-tuned teacher.
  pretraining_student = teacher_lib.record_of_task_info(
      dict(head=provenance.PRETRAINING, do_lower_case=True, vocab_md5=helpers.TINY_VOCAB_MD5,
           max_seq_length=16), str(tmp_path / "student" / "data_metadata.json"))
  assert _problems(pretrained, pretraining_student) == []
  fine_tuned = _run_folder(tmp_path, "fine_tuned", _vocab(tmp_path))
  assert _problems(fine_tuned, pretraining_student) == [
      f"--teacher={fine_tuned} is a fine-tuned classifier ({fine_tuned}/task_info.json): "
      f"pretraining distillation ({tmp_path}/student/data_metadata.json) needs a pretrained "
      f"model with its masked LM head"]


def _hf_folder(tmp_path, name, head, labels, do_lower_case=True):
  """A Hugging Face model folder as convert_checkpoint writes it (task_info.json removed, as a
  downloaded folder has none)."""
  config = helpers.tiny_config(hidden_size=16, intermediate_size=24)
  model = (classifier_head.build_classifier_model(config, len(labels))
           if head == classifier_head.CLASSIFIER else None)
  if model is None:
    from bert_tf.model import encoder  # pylint: disable=g-import-not-at-top
    model = encoder.build_encoder(config)
  folder = tmp_path / name
  folder.mkdir()
  conversion.write_converted(
      model, config, str(folder / "model.safetensors"), "hf", overwrite=False,
      task_info=dict(labels=labels, regression=False),
      tokenizer=conversion.Tokenizer(_vocab(tmp_path, f"{name}_vocab.txt"), do_lower_case))
  task_info = folder / provenance.TASK_INFO_FILE
  if task_info.exists():
    task_info.unlink()
  return str(folder)


def test_hugging_face_teachers(tmp_path):
  student = _student(tmp_path, _vocab(tmp_path))
  swapped = list(reversed(LABELS))
  teacher = _hf_folder(tmp_path, "hf_teacher", classifier_head.CLASSIFIER, swapped,
                       do_lower_case=False)
  record = teacher_lib.read_record(teacher)
  assert (record.head, record.labels, record.do_lower_case, record.vocab_md5,
          record.max_seq_length) == ("classifier", tuple(swapped), False,
                                     helpers.TINY_VOCAB_MD5, None)
  student_file = f"{tmp_path}/student/task_info.json"
  assert _problems(teacher, student) == [
      f"--teacher={teacher} has the student's labels in another order: teacher {swapped}, "
      f"student {LABELS} (teacher: {teacher}/config.json; student: {student_file}); its "
      f"soft targets would teach the wrong labels",
      f"--teacher={teacher}: it was trained with do_lower_case=False but the student with "
      f"do_lower_case=True (teacher: {teacher}/tokenizer_config.json; student: "
      f"{student_file})"]
  encoder_only = _hf_folder(tmp_path, "hf_encoder", None, LABELS)
  assert _problems(encoder_only, student) == [
      f"--teacher={encoder_only} records no head: a teacher must be a model fine-tuned on the "
      f"student's task (classifier, {student_file}), not a pretrained encoder"]
