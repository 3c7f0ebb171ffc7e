"""--distill_augment's altered copies (tasks/augmenting.py): what each alteration does to a
copy, their rates, the guarantees (distinct, non-empty, deterministic per seed), the flag's
refusals, the tasks' copies (run_classifier, run_ner) and the resume check that names them.

Data: tests/data/classifier/source (real sentences; tests/data/README.md).
"""

import collections
import os

import pytest

from bert_tf.tasks import augmenting
from bert_tf.tasks import fine_tuning
from bert_tf.tasks.classifier import data as classifier_data
from bert_tf.tasks.classifier import run as cr
from bert_tf.tasks.tagging import data as tagging_data
from bert_tf.tasks.tagging import run as tagging_run
from bert_tf.training import run_folder
from bert_tf.training.errors import TrainingError
from tests.helpers import TEST_DATA
from tests.tasks.classifier.test_run import CONFIG, source_settings


def _sentences(count=48):
  with open(os.path.join(TEST_DATA, "classifier", "source", "train.tsv"), encoding="utf-8") as f:
    rows = f.read().splitlines()[1:count + 1]
  return [(tuple(row.split("\t")[0].split()),) for row in rows]


def _is_subsequence(part, whole):
  words = iter(whole)
  return all(word in words for word in part)


def test_each_alteration_alone_does_what_it_says():
  inputs = _sentences()
  pool = collections.Counter(w for (text,) in inputs for w in text)
  dropped = augmenting.altered_copies(inputs, 3, seed=1,
                                      alteration=augmenting.Alteration(0.5, 0.0, 0.0))
  for index, (text,) in dropped:  # words dropped: the rest in order
    assert len(text) < len(inputs[index][0]) and _is_subsequence(text, inputs[index][0])
  swapped = augmenting.altered_copies(inputs, 3, seed=1,
                                      alteration=augmenting.Alteration(0.0, 0.5, 0.0))
  for index, (text,) in swapped:  # as long, some words replaced by words of the training text
    source = inputs[index][0]
    assert len(text) == len(source) and text != source and all(w in pool for w in text)
  spans = augmenting.altered_copies(inputs, 3, seed=1,
                                    alteration=augmenting.Alteration(0.0, 0.0, 1.0))
  for index, (text,) in spans:  # a run of at least half the words, in place
    source = inputs[index][0]
    assert 2 * len(text) >= len(source) and len(text) < len(source)
    assert any(source[i:i + len(text)] == text for i in range(len(source)))


def test_the_default_rates_and_the_guarantees():
  inputs = _sentences()
  copies = augmenting.altered_copies(inputs, 8, seed=3)
  # Every input of several words gets its 8 copies, each distinct from every input and copy.
  assert collections.Counter(index for index, _ in copies) == {i: 8 for i in range(48)}
  texts = [fields for _, fields in copies]
  assert len(set(texts)) == len(texts) and not set(texts) & set(inputs)
  assert all(text for fields in texts for text in fields)
  # Without the span step (which shortens a quarter of the copies), 10% of the words dropped
  # and 10% swapped: a copy keeps about 90% of its input's length.
  whole = augmenting.altered_copies(inputs, 8, seed=3,
                                    alteration=augmenting.Alteration(0.1, 0.1, 0.0))
  kept = sum(len(t) for _, (t,) in whole) / sum(len(inputs[i][0]) for i, _ in whole)
  assert 0.87 < kept < 0.93
  shortened = sum(len(t) < len(inputs[i][0]) * 0.85 for i, (t,) in copies) / len(copies)
  assert 0.15 < shortened < 0.40  # the span step (25%) and the odd heavily dropped copy


def test_copies_are_drawn_from_the_seed_alone():
  inputs = _sentences(10)
  assert augmenting.altered_copies(inputs, 4, seed=5) == augmenting.altered_copies(
      inputs, 4, seed=5)
  assert augmenting.altered_copies(inputs, 4, seed=5) != augmenting.altered_copies(
      inputs, 4, seed=6)
  assert augmenting.altered_copies(inputs, 0, seed=5) == []
  assert augmenting.altered_copies([], 4, seed=5) == []


def test_an_input_with_few_possible_copies_gets_fewer_and_pairs_alter_both_texts():
  # One-word inputs over a two-word training text: swapping gives only the other input,
  # dropping gives an empty text; no copy can be made, and the search stops.
  inputs = [(("yes",),), (("no",),)]
  assert augmenting.altered_copies(inputs, 5, seed=0) == []
  pairs = [(("the", "cat", "sat", "on", "the", "mat"), ("a", "dog", "lay", "by", "the", "door"))]
  made = augmenting.altered_copies(pairs, 20, seed=0,
                                   alteration=augmenting.Alteration(0.3, 0.0, 0.0))
  assert len(made) == 20 and all(len(fields) == 2 and all(fields) for _, fields in made)
  # Each text altered on its own: each is changed in most copies (1 - 0.7^6 of them).
  assert sum(fields[0] != pairs[0][0] for _, fields in made) > 12
  assert sum(fields[1] != pairs[0][1] for _, fields in made) > 12


def test_bad_counts_and_rates_are_refused():
  assert augmenting.copies_problems(0, None) == []
  assert augmenting.copies_problems(2, "teacher_dir") == []
  assert augmenting.copies_problems(-1, "t") == ["--distill_augment must be >= 0, got -1"]
  assert augmenting.copies_problems(3, None) == [
      "--distill_augment=3 makes inputs without labels: only a --teacher's soft targets train "
      "on them; add --teacher"]
  with pytest.raises(ValueError, match="copies must be >= 0"):
    augmenting.altered_copies(_sentences(2), -1, seed=0)
  with pytest.raises(ValueError, match=r"drop \+ swap must be at most 1"):
    augmenting.Alteration(0.6, 0.6, 0.0)
  with pytest.raises(ValueError, match=r"span must be in \[0, 1\]"):
    augmenting.Alteration(0.1, 0.1, 1.5)


def test_the_classifier_and_the_tagger_make_unlabelled_copies(tmp_path):
  examples = [classifier_data.InputExample("train-1", "A man walked to the town.", None, "a"),
              classifier_data.InputExample("train-2", "It rained all day long.", "Yes.", "b")]
  settings = source_settings(tmp_path, teacher="t", distill_augment=2, seed=4)
  copies = cr.altered_copies(examples, settings)
  expected = augmenting.altered_copies(
      [(tuple(e.text_a.split()),) + ((tuple(e.text_b.split()),) if e.text_b else ())
       for e in examples], 2, 4)
  assert [(c.text_a, c.text_b) for c in copies] == [
      (" ".join(f[0]), " ".join(f[1]) if len(f) > 1 else None) for _, f in expected]
  assert [c.guid for c in copies][:2] == ["copy-1-of-train-1", "copy-2-of-train-1"]
  assert all(c.label is classifier_data.UNLABELLED for c in copies)
  with pytest.raises(TrainingError, match="--distill_augment=2 makes inputs without labels"):
    source_settings(tmp_path, distill_augment=2).check(CONFIG)
  with pytest.raises(TrainingError, match="--distill_augment applies to classification"):
    source_settings(tmp_path, teacher="t", distill_augment=2, regression=True,
                    task_name="generic", text_a_column=0).check(CONFIG)
  sentences = [tagging_data.Sentence(("Emma", "walked", "to", "Highbury", "."),
                                     ("B-PER", "O", "O", "B-LOC", "O"), 0, 7)]
  tagged = tagging_run.altered_copies(sentences, 3, seed=1)
  assert [s.words for s in tagged] == [f[0] for _, f in augmenting.altered_copies(
      [(sentences[0].words,)], 3, 1)]
  assert [(s.tags, s.line, s.document) for s in tagged] == [(None, 7, 0), (None, 7, 1),
                                                          (None, 7, 2)]


def test_a_resume_with_other_copies_is_refused_naming_the_flag(tmp_path):
  made = fine_tuning.made_data_digest("--distill_augment", [("a b", None), ("c", "d")])
  assert list(made) == ["--distill_augment"] and len(made["--distill_augment"]) == 32
  assert fine_tuning.made_data_digest("--distill_augment", []) == {}
  assert made != fine_tuning.made_data_digest("--distill_augment", [("a b", None)])

  class Start:  # a resumed run's record: trained with the copies above
    resuming, where = True, "model.ckpt-5"
    info = {"train_data": dict({"train.tsv": "0" * 32}, **made)}

  class Settings:
    do_train, output_dir = True, str(tmp_path)

  run_folder.check_resumed_data(Settings, Start, {"train_data": dict(Start.info["train_data"])})
  other = fine_tuning.made_data_digest("--distill_augment", [("a b", None)])
  with pytest.raises(TrainingError, match=r"--distill_augment \(md5 .*; trained on "):
    run_folder.check_resumed_data(Settings, Start,
                                  {"train_data": dict({"train.tsv": "0" * 32}, **other)})
  with pytest.raises(TrainingError, match=r"--distill_augment \(trained on md5 .*; not part of "
                     r"this run\)"):
    run_folder.check_resumed_data(Settings, Start, {"train_data": {"train.tsv": "0" * 32}})
  # Copies added on resume: named as inputs the checkpoints never saw, not as a changed file.
  plain = {"train_data": {"train.tsv": "0" * 32}}
  with pytest.raises(TrainingError, match=r"--distill_augment \(md5 .*; not part of the data "
                     r"the checkpoints were trained on\).* give the run the inputs it was "
                     r"trained with \(the same files and flags\)"):
    run_folder.check_resumed_data(Settings, type("Plain", (Start,), dict(info=plain)),
                                  {"train_data": dict(plain["train_data"], **made)})
