"""run_sample (the main job): its task files, the figures it reports and summary.json.

The job itself runs for minutes (README, "What the main job shows"); these tests cover the parts
that decide what it prints: the dialogue / narration splits, the parsing of the tools' outputs and
the pretrained-vs-random comparison.
"""

import json
import math
import os

import pytest

from tests.helpers import load_script

run_sample = load_script("run_sample")


def _read(path):
  with open(path, encoding="utf-8") as f:
    header, *rows = f.read().splitlines()
  assert header == "sentence\tlabel"
  return [tuple(row.split("\t")) for row in rows]


def test_task_splits_are_balanced_disjoint_and_without_quotation_marks(tmp_path):
  sizes = run_sample.write_dialogue_task(run_sample.SAMPLE, str(tmp_path))
  assert sizes == run_sample.TASK_EXAMPLES
  splits = {split: _read(tmp_path / f"{split}.tsv") for split in sizes}
  seen = set()
  for split, rows in splits.items():
    assert len(rows) == sizes[split]
    labels = [label for _, label in rows]
    assert labels.count("dialogue") == labels.count("narration") == sizes[split] // 2
    texts = {text for text, _ in rows}
    assert not any('"' in text for text in texts)
    assert not texts & seen, f"{split} shares lines with another split"
    seen |= texts
  # The same seed gives the same files.
  again = tmp_path / "again"
  run_sample.write_dialogue_task(run_sample.SAMPLE, str(again))
  for split in sizes:
    assert (again / f"{split}.tsv").read_bytes() == (tmp_path / f"{split}.tsv").read_bytes()


def test_dev_set_is_big_enough_to_separate_a_few_points():
  # Three points apart near 0.7 must be more than two standard errors of the difference.
  figures = run_sample.comparison(0.73, 0.70, run_sample.TASK_EXAMPLES["dev"])
  assert figures["difference"] > 2 * figures["standard_error_difference"]


def test_task_needs_enough_lines(tmp_path):
  sample = tmp_path / "small.txt"
  sample.write_text('"Four words are spoken here."\nFour words of narration here.\n',
                    encoding="utf-8")
  with pytest.raises(ValueError, match=r"small\.txt: 1 dialogue lines, the splits need 2"):
    run_sample.write_dialogue_task(str(sample), str(tmp_path / "task"),
                                   examples={"train": 2, "dev": 2})


def test_comparison_figures():
  figures = run_sample.comparison(0.75, 0.6, 1000)
  assert figures["difference"] == pytest.approx(0.15)
  assert figures["standard_error_pretrained"] == pytest.approx(math.sqrt(0.75 * 0.25 / 1000))
  assert figures["standard_error_random_init"] == pytest.approx(math.sqrt(0.6 * 0.4 / 1000))
  assert figures["standard_error_difference"] == pytest.approx(
      math.sqrt(0.75 * 0.25 / 1000 + 0.6 * 0.4 / 1000))
  assert figures["dev_examples"] == 1000


def test_seconds_per_step_skips_the_compiling_loop():
  lines = [
      "I1125 loop.py:607] step 50/200 loss = 7.5 masked_lm_accuracy = 0.04 examples/s = 10.0 ETA\n",
      "unrelated line\n",
      "I1125 loop.py:607] step 100/200 loss = 6.7 masked_lm_accuracy = 0.05 examples/s = 160.0\n",
      "I1125 loop.py:607] step 150/200 loss = 6.6 masked_lm_accuracy = 0.06 examples/s = 320.0\n",
  ]
  # 32 examples per step at 160 and at 320 examples/s: 0.2 s and 0.1 s, mean 0.15.
  assert run_sample.seconds_per_step(lines, 32) == pytest.approx(2 * 32 / 480)
  assert run_sample.seconds_per_step(lines[:1], 32) is None


def test_read_results_and_write_json(tmp_path):
  results = tmp_path / "eval_results.txt"
  results.write_text("eval_accuracy = 0.6875\nglobal_step = 96\nnote = text\n", encoding="utf-8")
  assert run_sample.read_results(str(results)) == {"eval_accuracy": 0.6875, "global_step": 96.0}
  path = tmp_path / "summary.json"
  run_sample.write_json(str(path), {"b": 1, "a": [0.5]})
  assert json.loads(path.read_text(encoding="utf-8")) == {"a": [0.5], "b": 1}
  assert sorted(os.listdir(tmp_path)) == ["eval_results.txt", "summary.json"]  # no temporary


_NOISY_SCRIPT = (
    "import sys\n"
    "print('answer', flush=True)\n"
    "sys.stderr.write('2026-11-25 17:52:10.798791: E external/local_xla/xla/stream_executor/"
    "cuda/cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error: Failed call to "
    "cuInit: UNKNOWN ERROR (303)\\n')\n"
    "sys.stderr.write('a real error\\n')\n")


def test_the_queries_show_their_output_without_tensorflows_start_up_lines(capfd, monkeypatch):
  """The query steps import TensorFlow without bert_tf: the job hides TensorFlow's known
  start-up lines from them as the commands do, keeps every other line, and shows everything
  with BERT_TF_VERBOSE=1."""
  import sys  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv("BERT_TF_VERBOSE", raising=False)
  lines = run_sample.run_step("query", [sys.executable, "-c", _NOISY_SCRIPT],
                              plain_tensorflow=True)
  out = capfd.readouterr().out
  assert "answer\n" in out and "a real error\n" in out
  # (The echoed command holds the line too, inside the script: not at a line's start.)
  assert not any(line.startswith("2026-11-25") for line in out.splitlines())
  assert any(line.startswith("2026-11-25") for line in lines)  # captured all the same
  monkeypatch.setenv("BERT_TF_VERBOSE", "1")
  run_sample.run_step("query", [sys.executable, "-c", _NOISY_SCRIPT], plain_tensorflow=True)
  captured = capfd.readouterr()
  assert any(line.startswith("2026-11-25")
             for line in (captured.out + captured.err).splitlines())


def test_paired_comparison_counts_the_lines_each_model_alone_gets_right():
  labels = ["d", "n", "d", "n", "d", "n"]
  pretrained = ["d", "n", "d", "n", "n", "n"]  # 5 of 6
  random_init = ["d", "d", "n", "n", "n", "n"]  # 3 of 6
  figures = run_sample.paired_comparison(labels, pretrained, random_init)
  assert figures["paired_accuracy_pretrained"] == pytest.approx(5 / 6)
  assert figures["paired_accuracy_random_init"] == pytest.approx(3 / 6)
  assert (figures["dev_lines_only_pretrained_right"],
          figures["dev_lines_only_random_init_right"]) == (2, 0)
  # Per line +1, +1, 0, 0, 0, 0: mean 1/3, sample variance (2 - 6 / 9) / 5, over sqrt(6).
  differences = [1, 1, 0, 0, 0, 0]
  mean = sum(differences) / 6
  variance = sum((d - mean) ** 2 for d in differences) / 5
  assert figures["standard_error_difference_paired"] == pytest.approx(math.sqrt(variance / 6))
  with pytest.raises(ValueError, match="6 dev labels but 5 and 6 predictions"):
    run_sample.paired_comparison(labels, pretrained[:5], random_init)


def test_paired_error_is_below_the_independent_one_when_the_models_mostly_agree():
  labels = ["d"] * 700 + ["n"] * 300
  pretrained = ["d"] * 700 + ["d"] * 50 + ["n"] * 250   # 0.95
  random_init = ["d"] * 700 + ["d"] * 100 + ["n"] * 200  # 0.90, wrong wherever it is
  paired = run_sample.paired_comparison(labels, pretrained, random_init)
  independent = run_sample.comparison(paired["paired_accuracy_pretrained"],
                                      paired["paired_accuracy_random_init"], 1000)
  assert paired["standard_error_difference_paired"] < independent["standard_error_difference"]


def test_the_prediction_files_are_read_in_order(tmp_path):
  dev = tmp_path / "dev.tsv"
  dev.write_text("sentence\tlabel\nyes she said\tdialogue\nhe walked out\tnarration\n",
                 encoding="utf-8")
  predictions = tmp_path / "test_predictions.tsv"
  predictions.write_text("guid\tlabel\tdialogue\tnarration\ntest-1\tnarration\t0.4\t0.6\n"
                         "test-2\tnarration\t0.1\t0.9\n", encoding="utf-8")
  assert run_sample.read_dev_labels(str(dev)) == ["dialogue", "narration"]
  assert run_sample.read_predicted_labels(str(predictions)) == ["narration", "narration"]
  dev.write_text("text\tlabel\n", encoding="utf-8")
  with pytest.raises(ValueError, match="expected the header"):
    run_sample.read_dev_labels(str(dev))
