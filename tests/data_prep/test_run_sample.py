"""run_sample (the main job): its task files, the figures it reports and summary.json.

The job itself runs for minutes (README, "What the main job shows"); these tests cover the parts
that decide what it prints: the dialogue / narration splits, the parsing of the tools' outputs and
the pretrained-vs-random comparison.
"""

import json
import math
import os

import numpy as np
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


def test_task_needs_enough_lines(tmp_path):
  sample = tmp_path / "small.txt"
  sample.write_text('"Four words are spoken here."\nFour words of narration here.\n',
                    encoding="utf-8")
  with pytest.raises(ValueError, match=r"small\.txt: 1 dialogue lines, the splits need 2"):
    run_sample.write_dialogue_task(str(sample), str(tmp_path / "task"),
                                   examples={"train": 2, "dev": 2})


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


def test_dev_set_is_big_enough_to_separate_a_few_points():
  # The constants' comment: an accuracy near 0.7 on the dev lines has a standard error of
  # 0.0065, so a difference of three points is several of them.
  assert math.sqrt(0.7 * 0.3 / run_sample.TASK_EXAMPLES["dev"]) < 0.0066


def _seeded_reference(labels, pretrained, random_init):
  """seeded_comparison's figures computed another way: NumPy over a seeds x lines array."""
  y = np.array(labels)
  p = np.array([np.array(run) == y for run in pretrained], np.float64)  # seeds x lines
  r = np.array([np.array(run) == y for run in random_init], np.float64)
  per_seed = p.mean(axis=1) - r.mean(axis=1)
  per_line = p.mean(axis=0) - r.mean(axis=0)
  seeds_se = per_seed.std(ddof=1) / np.sqrt(len(per_seed)) if len(per_seed) > 1 else 0.0
  lines_se = per_line.std(ddof=1) / np.sqrt(len(per_line))
  return dict(difference=per_line.mean(), per_seed=per_seed, seeds=seeds_se, lines=lines_se,
              total=np.hypot(seeds_se, lines_se))


def test_seeded_comparison_pairs_the_seeds_and_adds_both_errors():
  labels = ["d", "n", "d", "n", "d", "n", "d", "n"]
  pretrained = [["d", "n", "d", "n", "d", "n", "n", "n"],   # 7 of 8
                ["d", "n", "d", "d", "d", "n", "d", "d"]]   # 6 of 8
  random_init = [["d", "d", "n", "n", "d", "n", "n", "n"],  # 5 of 8
                 ["n", "n", "d", "d", "d", "d", "n", "n"]]  # 4 of 8
  figures = run_sample.seeded_comparison(labels, pretrained, random_init)
  assert figures["dev_accuracies_pretrained"] == [7 / 8, 6 / 8]
  assert figures["dev_accuracies_random_init"] == [5 / 8, 4 / 8]
  assert figures["dev_accuracy_pretrained"] == pytest.approx(13 / 16)
  assert figures["dev_accuracy_random_init"] == pytest.approx(9 / 16)
  assert figures["seed_differences"] == pytest.approx([2 / 8, 2 / 8])
  reference = _seeded_reference(labels, pretrained, random_init)
  assert figures["difference"] == pytest.approx(reference["difference"]) == 4 / 16
  # Both seeds differ by the same amount: the seeds add nothing, the lines all of it.
  assert figures["standard_error_seeds"] == 0
  assert figures["standard_error_lines"] == pytest.approx(reference["lines"])
  assert figures["standard_error_difference"] == pytest.approx(reference["total"])
  # Per line, the pretrained runs' share right minus the random ones': .5 .5 .5 0 0 .5 .5 -.5.
  assert (figures["dev_lines_pretrained_ahead"], figures["dev_lines_random_init_ahead"]) == (5, 1)
  assert figures["dev_examples"] == 8


def test_seeded_comparison_against_numpy_on_random_answers():
  rng = np.random.default_rng(7)
  labels = list(rng.choice(["d", "n"], 300))
  answers = lambda accuracy: [y if rng.random() < accuracy else ("n" if y == "d" else "d")
                              for y in labels]
  for seeds in (1, 2, 5):
    pretrained = [answers(0.72) for _ in range(seeds)]
    random_init = [answers(0.65) for _ in range(seeds)]
    figures = run_sample.seeded_comparison(labels, pretrained, random_init)
    reference = _seeded_reference(labels, pretrained, random_init)
    assert figures["difference"] == pytest.approx(reference["difference"])
    assert figures["seed_differences"] == pytest.approx(list(reference["per_seed"]))
    assert figures["standard_error_seeds"] == pytest.approx(reference["seeds"])
    assert figures["standard_error_lines"] == pytest.approx(reference["lines"])
    assert figures["standard_error_difference"] == pytest.approx(reference["total"])
    assert (figures["standard_error_seeds"] > 0) == (seeds > 1)


def test_seeded_comparison_refuses_answers_that_do_not_line_up():
  labels = ["d", "n", "d"]
  with pytest.raises(ValueError, match="3 dev labels but 2 predictions"):
    run_sample.seeded_comparison(labels, [["d", "n"]], [["d", "n", "d"]])
  with pytest.raises(ValueError, match="2 pretrained and 1 random runs"):
    run_sample.seeded_comparison(labels, [labels, labels], [labels])


def test_seeds_flag():
  parser = run_sample.build_parser()
  assert parser.parse_args([]).seeds == run_sample.SEEDS == (1, 2, 3, 4, 5)
  assert parser.parse_args(["--seeds=3"]).seeds == (3,)
  assert parser.parse_args(["--seeds=4,1"]).seeds == (4, 1)
  for bad in ("1,1", "-1", "a", ""):
    with pytest.raises(SystemExit):
      parser.parse_args([f"--seeds={bad}"])


def test_a_background_step_is_waited_for_and_its_failure_ends_the_job(tmp_path, capfd):
  """start_step/finish_step: the command's output goes to its log; a failure ends the job with
  the log's last lines and the step's name; stop_step ends one still running."""
  import sys  # pylint: disable=g-import-not-at-top
  ok = run_sample.start_step("fine", [sys.executable, "-c", "print('done here')"],
                             str(tmp_path / "ok.log"))
  run_sample.finish_step(ok)
  assert (tmp_path / "ok.log").read_text(encoding="utf-8") == "done here\n"
  out = capfd.readouterr().out
  assert "=== fine (in the background" in out and "(fine: finished in the background" in out
  failing = run_sample.start_step(
      "broken", [sys.executable, "-c", "import sys\nfor i in range(40): print('line', i)\n"
                 "sys.exit(3)"], str(tmp_path / "bad.log"))
  with pytest.raises(SystemExit, match=r"step 'broken' failed with exit code 3 \(its log: "):
    run_sample.finish_step(failing, tail=5)
  out = capfd.readouterr().out
  assert "line 39\n" in out and "line 35\n" in out and "line 34\n" not in out
  slow = run_sample.start_step("slow", [sys.executable, "-c", "import time; time.sleep(600)"],
                               str(tmp_path / "slow.log"))
  run_sample.stop_step(slow)
  assert slow.process.returncode is not None and slow.process.returncode != 0
