"""benchmarks/distillation.py's goal arithmetic (the verdicts its results file and the pages
quote) on hand-made rows, and the tagger's training subset, without training anything."""

# pylint: disable=protected-access

import os
import sys

import pytest

from bert_tf.tasks.tagging import data as tagging_data
from tests.helpers import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
import distillation  # pylint: disable=g-import-not-at-top,wrong-import-position


def _row(setting, seed, accuracy, train=10.0, cache=0.0, speed=100.0, f1=None):
  row = dict(setting=setting, seed=seed, eval_accuracy=accuracy, train_seconds=train,
             cache_seconds=cache, examples_per_second=speed)
  if f1 is not None:
    row["eval_f1"] = f1
  return row


STUDENT = "student (3 layers, 360 labelled) "
ROWS = [
    _row("teacher (6 layers, 360 labelled)", 0, 0.9),
    _row(STUDENT + "alone", 1, 0.85, train=10.0, speed=100.0),
    _row(STUDENT + "distilled", 1, 0.88, train=15.0, speed=60.0),
    _row(STUDENT + "distilled, cached teacher", 1, 0.88, train=11.0, cache=2.0, speed=80.0),
    _row(STUDENT + "alone", 2, 0.90, train=20.0, speed=50.0),
    _row(STUDENT + "distilled", 2, 0.89, train=30.0, speed=40.0),
    _row(STUDENT + "distilled, cached teacher", 2, 0.89, train=22.0, cache=2.0, speed=50.0),
    _row("tagger teacher (6 layers, 400 sentences)", 0, 0.99, f1=0.9),
    _row("tagger student (3 layers, 400 sentences) alone", 1, 0.97, f1=0.80),
    _row("tagger student (3 layers, 400 sentences) distilled", 1, 0.98, f1=0.86),
]


def test_accuracy_goals_per_seed_and_median():
  found = distillation.accuracy_goals(ROWS, [360], transfer=False)
  assert found["retention"]["per_seed"] == pytest.approx({1: 0.88 / 0.9, 2: 0.89 / 0.9})
  assert found["retention"]["median"] == pytest.approx((0.88 + 0.89) / 2 / 0.9)
  assert found["retention"]["teacher"] == 0.9
  assert found["gain_360"]["per_seed"] == pytest.approx({1: 0.03, 2: -0.01})
  assert found["gain_360"]["median"] == pytest.approx(0.01)
  assert found["tagging_gain"]["per_seed"] == pytest.approx({1: 0.01})
  assert found["tagging_f1_gain"]["per_seed"] == pytest.approx({1: 0.06})
  assert found["tagging_gain"]["goal"] == 0.005 and found["tagging_f1_gain"]["goal"] is None


def test_cost_goals_divide_each_seed_by_its_twin_alone():
  cost = distillation.cost_goals(ROWS, 360)
  assert cost["cached_with_cache_pass"]["per_seed"] == pytest.approx({1: 1.3, 2: 1.2})
  assert cost["cached_with_cache_pass"]["median"] == pytest.approx(1.25)
  assert cost["cached_training_phase"]["per_seed"] == pytest.approx({1: 1.1, 2: 1.1})
  assert cost["uncached_training_phase"]["per_seed"] == pytest.approx({1: 1.5, 2: 1.5})
  assert cost["cached_steady_seconds_per_example"]["per_seed"] == pytest.approx({1: 1.25,
                                                                                 2: 1.0})
  assert cost["uncached_steady_seconds_per_example"]["per_seed"] == pytest.approx({1: 100 / 60,
                                                                                   2: 1.25})
  assert distillation.cost_goals(ROWS[:3], 360) == {}  # no cached twin, no cost
  assert not any(key.startswith("cpu_") for key in cost)  # rows without CPU seconds


def test_cost_goals_in_cpu_seconds():
  cpu = dict(zip(range(1, 7), (10.0, 14.0, 11.0, 20.0, 30.0, 24.0)))
  rows = [dict(row, train_cpu_seconds=cpu.get(i), cache_cpu_seconds=1.0 if "cached" in
               row["setting"] else 0.0) for i, row in enumerate(ROWS[:7])]
  cost = distillation.cost_goals(rows, 360)
  assert cost["cpu_cached_with_cache_pass"]["per_seed"] == pytest.approx({1: 1.2, 2: 1.25})
  assert cost["cpu_cached_with_cache_pass"]["goal"] == 1.2
  assert cost["cpu_cached_training_phase"]["per_seed"] == pytest.approx({1: 1.1, 2: 1.2})
  assert cost["cpu_uncached_training_phase"]["per_seed"] == pytest.approx({1: 1.4, 2: 1.5})
  assert "cpu_cached_with_teacher" not in cost  # rows without the teacher's phase timed


def test_cost_goals_with_the_teachers_loading_and_dev_evaluation():
  """The cached twin's CPU seconds of training + the cache pass + the teacher's loading and
  dev evaluation (_teach), over the twin alone's training phase; reported, not the goal."""
  cpu = dict(zip(range(1, 7), (10.0, 14.0, 11.0, 20.0, 30.0, 24.0)))
  rows = [dict(row, train_cpu_seconds=cpu.get(i),
               cache_cpu_seconds=1.0 if "cached" in row["setting"] else 0.0,
               teacher_cpu_seconds=3.0 if "distilled" in row["setting"] else 0.0)
          for i, row in enumerate(ROWS[:7])]
  cost = distillation.cost_goals(rows, 360)
  assert cost["cpu_cached_with_teacher"]["per_seed"] == pytest.approx({1: 1.5, 2: 1.4})
  assert cost["cpu_cached_with_teacher"]["median"] == pytest.approx(1.45)
  assert cost["cpu_cached_with_teacher"]["goal"] is None
  assert cost["cpu_cached_with_cache_pass"]["per_seed"] == pytest.approx({1: 1.2, 2: 1.25})


def _cell(p50, b32):
  return dict(p50_ms=p50, p99_ms=p50 * 1.2, batch8_per_s=1.0, batch32_per_s=b32)


def test_serving_goals_and_the_verdict_lines():
  summary = {"teacher: text model": dict(short=_cell(10.0, 100.0), long=_cell(40.0, 20.0)),
             "student: text model": dict(short=_cell(5.0, 210.0), long=_cell(16.0, 45.0)),
             "teacher: classifier export": dict(short=_cell(9.0, 90.0), long=_cell(9.0, 90.0)),
             "student: classifier export": dict(short=_cell(6.0, 150.0), long=_cell(6.0, 150.0))}
  serving = distillation.serving_goals(summary)
  assert serving["text model"] == pytest.approx(dict(short_b1_p50=2.0, short_b32_per_s=2.1,
                                                     long_b1_p50=2.5, long_b32_per_s=2.25))
  assert serving["classifier export"]["short_b1_p50"] == pytest.approx(1.5)
  goals = dict(accuracy=distillation.accuracy_goals(ROWS, [360], False),
               cost=distillation.cost_goals(ROWS, 360), serving=serving)
  lines = distillation.goal_lines(goals)
  assert lines[0] == ("distilled student's dev accuracy / the teacher's (0.900): median 0.983, "
                      "per seed 0.978, 0.989 (goal >= 0.97: met)")
  assert lines[1] == ("gain over the twin alone, 360 labelled (dev accuracy): median 0.010, "
                      "per seed 0.030, -0.010 (goal >= 0.01: met)")
  assert ("training cost, distilled / alone: cached with cache pass: median 1.250, per seed "
          "1.300, 1.200 (goal <= 1.2: NOT met)") in lines
  assert ("serving, text model: the teacher's p50 / the student's, batch 1, short 2.00x (goal "
          ">= 1.8x: met), long 2.50x; batch-32 examples/s, student / teacher: short 2.10x, "
          "long 2.25x") in lines
  assert any(line.startswith("serving, classifier export: the teacher's p50 / the student's, "
                             "batch 1, short 1.50x (goal >= 1.8x: NOT met)") for line in lines)


def test_the_tagger_subset_holds_the_first_sentences_whole(tmp_path):
  every = tagging_data.read_conll(os.path.join(distillation.NER, "train.txt"))
  for count in (1, 5, 32):
    kept = tagging_data.read_conll(distillation._ner_subset(str(tmp_path), count))
    assert [s.words for s in kept] == [s.words for s in every[:count]]
    assert [s.tags for s in kept] == [s.tags for s in every[:count]]
  whole = tagging_data.read_conll(distillation._ner_subset(str(tmp_path), 10_000))
  assert len(whole) == len(every) == 400


def test_half_cuts_the_steps_in_two_intervals():
  assert distillation._half(360, 3.0) == 34
  assert distillation._half(48, 3.0) == 5
  assert distillation._half(1, 1.0) == 1


def test_the_books_task_is_balanced_disjoint_and_the_same_on_every_run(tmp_path):
  """--task=books: eight labels, 300 training and 125 dev sentences each from the committed
  corpus's books, no sentence in both splits, the same files on a second run; the subset and
  transfer helpers cut its rows as the source task's."""
  task = distillation.make_task("books", str(tmp_path / "a"))
  again = distillation.make_task("books", str(tmp_path / "b"))
  splits = {}
  for split in ("train", "dev"):
    text = (tmp_path / "a" / "books_task" / f"{split}.tsv").read_text(encoding="utf-8")
    assert text == (tmp_path / "b" / "books_task" / f"{split}.tsv").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "sentence\tlabel"
    splits[split] = [line.split("\t") for line in lines[1:]]
    counts = {}
    for sentence, book in splits[split]:
      assert 8 <= len(sentence.split()) <= 40
      counts[book] = counts.get(book, 0) + 1
    assert counts == {book: 300 if split == "train" else 125
                      for book in distillation.BOOKS.values()}
  assert not {s for s, _ in splits["train"]} & {s for s, _ in splits["dev"]}
  assert (task.train_rows, again.train_rows) == (2400, 2400)
  assert task.settings() == dict(text_a_column="sentence", text_b_column=None, max_seq_length=48)
  subset = distillation._subset(str(tmp_path / "a"), 40, task)
  with open(os.path.join(subset, "train.tsv"), encoding="utf-8") as f:
    assert f.read().splitlines()[1:] == ["\t".join(row) for row in splits["train"][:40]]
  with open(distillation._transfer(str(tmp_path / "a"), 2390, task), encoding="utf-8") as f:
    assert f.read().splitlines() == [row[0] for row in splits["train"][2390:]]


def test_the_tagger_transfer_sentences_are_the_others_untagged(tmp_path):
  """--tagging_labelled=32 --tagging_transfer: the twins' labelled file is train.txt's first 32
  sentences with their tags; the transfer file, read as run_ner reads it, the next 368 without
  tags, a sentence a line; the three twins take the same steps (the two without transfer
  sentences more epochs)."""
  from bert_tf.tasks import fine_tuning  # pylint: disable=g-import-not-at-top
  every = tagging_data.read_conll(os.path.join(distillation.NER, "train.txt"))
  twins = distillation._tagger_twins(32, 400, True, "teacher", str(tmp_path), 3.0)
  assert [name for name, *_ in twins] == ["alone", "distilled", "distilled with transfer"]
  assert [twin[1] for twin in twins] == [twins[0][1]] * 3  # one labelled file
  assert [twin[4] for twin in twins[:2]] == [{}, dict(teacher="teacher")]
  extra = twins[2][4]
  assert extra["teacher"] == "teacher" and set(extra) == {"teacher", "transfer_file"}
  kept = tagging_data.read_conll(twins[0][1])
  assert [(s.words, s.tags) for s in kept] == [(s.words, s.tags) for s in every[:32]]
  transfer = tagging_data.read_plain_sentences(extra["transfer_file"])
  assert [s.words for s in transfer] == [s.words for s in every[32:400]]
  assert all(s.tags is None for s in transfer)
  assert [(twin[2], twin[3]) for twin in twins] == [(37.5, 32), (37.5, 32), (3.0, 400)]
  assert {fine_tuning.num_train_steps(records, 16, epochs)
          for _, _, epochs, records, _ in twins} == {75}
  plain = distillation._tagger_twins(400, 400, False, "teacher", str(tmp_path), 3.0)
  assert [(n, e, r, x) for n, _, e, r, x in plain] == [
      ("alone", 3.0, 400, {}), ("distilled", 3.0, 400, dict(teacher="teacher"))]


def test_the_tagger_goals_take_the_transfer_twin_without_classifier_rows():
  size = "tagger student (3 layers, 32 of 400 sentences labelled) "
  rows = [_row("tagger teacher (6 layers, 400 sentences)", 0, 0.99, f1=0.9),
          _row(size + "alone", 1, 0.970, f1=0.60), _row(size + "distilled with transfer", 1,
                                                         0.985, f1=0.75),
          _row(size + "alone", 2, 0.975, f1=0.65), _row(size + "distilled with transfer", 2,
                                                         0.978, f1=0.66)]
  found = distillation.accuracy_goals(rows, [48, 360], transfer=False)
  assert set(found) == {"tagging_gain", "tagging_f1_gain", "tagging_retention"}
  plain = [_row(size + "distilled", 1, 0.969, f1=0.5), _row(size + "distilled", 2, 0.977, f1=0.6)]
  both = distillation.accuracy_goals(rows + plain, [48], transfer=False)
  assert both["tagging_gain_without_transfer"]["per_seed"] == pytest.approx({1: -0.001, 2: 0.002})
  assert both["tagging_gain"] == found["tagging_gain"]  # the goal stays the transfer twin's
  assert found["tagging_gain"]["per_seed"] == pytest.approx({1: 0.015, 2: 0.003})
  assert found["tagging_gain"]["median"] == pytest.approx(0.009)
  assert found["tagging_gain"]["setting"] == size + "distilled with transfer"
  assert found["tagging_f1_gain"]["per_seed"] == pytest.approx({1: 0.15, 2: 0.01})
  assert found["tagging_retention"]["per_seed"] == pytest.approx({1: 0.985 / 0.99,
                                                                  2: 0.978 / 0.99})
  lines = distillation.goal_lines(dict(accuracy=found))
  assert lines[0] == ("tagger: gain over the twin alone (dev token accuracy): median 0.009, "
                      "per seed 0.015, 0.003 (goal >= 0.005: met)")


def _tagging_figures(name):
  """A tagging results file's goals (the script's own functions), its rows and the medians of
  its settings' token accuracy."""
  import json  # pylint: disable=g-import-not-at-top
  import statistics  # pylint: disable=g-import-not-at-top
  with open(os.path.join(REPO_ROOT, "benchmarks", "results", name), encoding="utf-8") as f:
    saved = json.load(f)
  found = distillation.tagging_goals(saved["rows"])
  prefix = found["tagging_gain"]["setting"][:-len("distilled with transfer")]
  medians = {name: statistics.median(r["eval_accuracy"] for r in saved["rows"]
                                     if r["setting"] == prefix + name)
             for name in ("alone", "distilled with transfer")}
  return found, saved["rows"], medians


def test_the_tagging_section_quotes_its_results_files():
  """The figures the benchmarks page states for the tagger with transfer sentences (32 and 100
  labelled) are the results files' (recomputed with the script's own functions), and its
  verdicts are theirs."""
  with open(os.path.join(REPO_ROOT, "benchmarks", "README.md"), encoding="utf-8") as f:
    page = " ".join(f.read().split())
  quoted = []
  gains = {}
  for labelled, name in ((32, "distillation_tagging_2026-12-06.json"),
                         (100, "distillation_tagging_100_2026-12-06.json")):
    found, rows, medians = _tagging_figures(name)
    gain, f1 = found["tagging_gain"], found["tagging_f1_gain"]
    assert f"{labelled} of 400 sentences labelled" in gain["setting"]
    assert gain["median"] >= 0.005 and found["tagging_gain_without_transfer"]["median"] < 0.005
    points = sorted(v * 100 for v in gain["per_seed"].values())
    f1_points = sorted(v * 100 for v in f1["per_seed"].values())
    gains[labelled] = gain["median"] * 100
    quoted.append(f"by {points[0]:.1f} to {points[-1]:.1f} points of token accuracy (median "
                  f"{gains[labelled]:+.1f}")
    quoted.append(f"{f1_points[0]:.0f} to {f1_points[-1]:.0f} points of entity F1")
    if labelled == 32:
      teacher = rows[0]["eval_accuracy"]
      quoted.append(f"{medians['distilled with transfer']:.3f} dev token accuracy against "
                    f"{medians['alone']:.3f} alone (3 seeds; teacher {teacher:.3f})")
    else:
      without = found["tagging_gain_without_transfer"]["median"] * 100
      quoted.append(f"within four dev words of it ({without:+.2f} points, median)")
  quoted += [f"+0.5 point on tokens: met with transfer data ({gains[32]:+.1f} with 32 labelled "
             f"sentences, {gains[100]:+.1f} with 100)",
             f"never shown, {gains[32]:+.1f} points (median of three seeds; {gains[100]:+.1f} "
             f"with 100 labelled sentences"]
  for text in quoted:
    assert text in page, text


class _Stop(Exception):
  """Ends a benchmark run at its first training run (the teacher's), once its settings are
  seen."""


@pytest.mark.parametrize("program", ["sentences", "tagging"])
def test_the_teachers_are_fine_tuned_with_a_fixed_seed(program, tmp_path, monkeypatch):
  """Each run's teacher is fine-tuned with distillation.TEACHER_SEED, not unseeded: a rerun
  trains the same teacher, so its students' rows move with their own seeds only."""
  from bert_tf.tasks.classifier import run as cr  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import run as nr  # pylint: disable=g-import-not-at-top
  seen = []

  def first_run(config, settings, *args, **kwargs):  # pylint: disable=unused-argument
    seen.append((settings.output_dir, settings.seed))
    raise _Stop()

  monkeypatch.setattr(cr, "run_classifier", first_run)
  monkeypatch.setattr(nr, "run_ner", first_run)
  with pytest.raises(_Stop):
    if program == "sentences":
      distillation.run([1], [48], 1.0, str(tmp_path))
    else:
      distillation.run_tagging([1], 32, 1.0, 1.0, str(tmp_path))
  (output_dir, seed), = seen
  assert "teacher" in os.path.basename(output_dir)
  assert seed == distillation.TEACHER_SEED == 0


def test_the_sweep_pairs_are_parsed_and_bad_ones_named():
  assert distillation.parse_sweep("0:2, 0.9:2,0.5:4") == [(0.0, 2.0), (0.9, 2.0), (0.5, 4.0)]
  assert distillation.parse_sweep("") == []
  for bad in ("0.5", "a:2", "1.5:2", "0.5:0", "0.5:-1"):
    with pytest.raises(ValueError, match=f"--sweep: '{bad}' is not ALPHA:T"):
      distillation.parse_sweep(f"0:2,{bad}")


def test_the_sweep_twins_carry_their_alpha_and_temperature(tmp_path):
  task = distillation.make_task("source", str(tmp_path))
  twins = dict(distillation._twins(48, False, "teacher", str(tmp_path), 3.0, task,
                                   sweep=[(0.0, 2.0), (0.9, 4.0)]))
  assert "distill_alpha" not in twins["distilled"]  # the default twin takes the flags' defaults
  zero, high = twins["distilled (alpha 0, T 2)"], twins["distilled (alpha 0.9, T 4)"]
  assert (zero["distill_alpha"], zero["distill_temperature"]) == (0.0, 2.0)
  assert (high["distill_alpha"], high["distill_temperature"]) == (0.9, 4.0)
  assert zero["teacher"] == "teacher" and zero["num_train_epochs"] == 3.0


def test_the_sweep_gains_are_per_seed_against_the_twin_alone():
  student = "student (3 layers, 48 labelled) "
  rows = [_row("teacher (6 layers, 360 labelled)", 0, 0.9)]
  for seed, (alone, default, zero) in {1: (0.80, 0.83, 0.78), 2: (0.70, 0.76, 0.75),
                                       3: (0.75, 0.75, 0.80)}.items():
    rows += [_row(student + "alone", seed, alone), _row(student + "distilled", seed, default),
             _row(student + "distilled (alpha 0, T 2)", seed, zero)]
  gains = distillation.sweep_gains(rows, [48], False, [(0.0, 2.0), (0.5, 2.0)])
  default, zero = gains["48"]  # the default first, not twice
  assert (default["pair"], default["defaults"], zero["pair"], zero["defaults"]) == (
      "0.5:2", True, "0:2", False)
  assert default["per_seed"] == pytest.approx({1: 0.03, 2: 0.06, 3: 0.0})
  assert default["median"] == pytest.approx(0.03)
  assert zero["median"] == pytest.approx(0.05)
  assert zero["accuracy"] == pytest.approx(0.78)
  lines = distillation.sweep_lines(gains)
  assert lines[0].startswith("48 labelled, alpha:T 0.5:2 (the defaults): dev accuracy 0.760")
  assert lines[1] == ("48 labelled, alpha:T 0:2: dev accuracy 0.780, gain over alone +5.0 "
                      "points (seeds -2.0, +5.0, +5.0)")


def test_the_augmented_twin_and_its_twins_take_the_same_steps(tmp_path):
  """--augment=N: the twin distilled with N altered copies a sentence, and the twins alone and
  distilled without copies on as many records' worth of steps (more epochs); the goals read
  the twin with copies."""
  task = distillation.make_task("source", str(tmp_path))
  distillation._subset(str(tmp_path), 48, task)
  twins = distillation._twins(48, False, "teacher", str(tmp_path), 3.0, task, augment=8,
                              seed=2)
  assert [name for name, _ in twins] == ["alone", "distilled", "distilled with 8 altered copies"]
  alone, plain, copies = (extra for _, extra in twins)
  assert copies["distill_augment"] == 8 and copies["num_train_epochs"] == 3.0
  assert alone["num_train_epochs"] == plain["num_train_epochs"] == 3.0 * (48 + 8 * 48) / 48
  assert "distill_augment" not in plain and plain["teacher"] == "teacher"
  student = "student (3 layers, 48 labelled) "
  rows = [_row("teacher (6 layers, 360 labelled)", 0, 0.9)]
  for seed, (alone_acc, copies_acc) in {1: (0.80, 0.85), 2: (0.70, 0.74)}.items():
    rows += [_row(student + "alone", seed, alone_acc),
             _row(student + "distilled", seed, 0.1),
             _row(student + "distilled with 8 altered copies", seed, copies_acc)]
  found = distillation.accuracy_goals(rows, [48], False, augment=8)
  assert found["gain_48"]["per_seed"] == pytest.approx({1: 0.05, 2: 0.04})
  assert found["gain_48"]["setting"] == student + "distilled with 8 altered copies"


def test_the_tagger_twin_with_copies_and_its_twins_take_the_same_steps(tmp_path):
  """--tagging_augment=N: a third tagger twin distilled with --distill_augment=N on the labelled
  sentences; the other two take as many steps (more epochs); the goals read it."""
  from bert_tf.tasks import fine_tuning  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import run as nr  # pylint: disable=g-import-not-at-top
  twins = distillation._tagger_twins(32, 400, False, "teacher", str(tmp_path), 3.0, augment=8,
                                     seed=2)
  assert [name for name, *_ in twins] == ["alone", "distilled", "distilled with 8 altered copies"]
  copies = len(nr.altered_copies(tagging_data.read_conll(twins[0][1]), 8, 2))
  assert copies == 8 * 32
  assert [(twin[2], twin[3]) for twin in twins] == [(3.0 * 288 / 32, 32), (3.0 * 288 / 32, 32),
                                                    (3.0, 288)]
  assert twins[2][4] == dict(teacher="teacher", distill_augment=8)
  assert len({fine_tuning.num_train_steps(records, 16, epochs)
              for _, _, epochs, records, _ in twins}) == 1
  size = "tagger student (3 layers, 32 of 400 sentences labelled) "
  rows = [_row("tagger teacher (6 layers, 400 sentences)", 0, 0.99, f1=0.9),
          _row(size + "alone", 1, 0.970, f1=0.6), _row(size + "distilled", 1, 0.971, f1=0.6),
          _row(size + "distilled with 8 altered copies", 1, 0.980, f1=0.7)]
  found = distillation.accuracy_goals(rows, [48], transfer=False)
  assert found["tagging_gain"]["setting"] == size + "distilled with 8 altered copies"
  assert found["tagging_gain"]["per_seed"] == pytest.approx({1: 0.010})
  assert found["tagging_gain_without_transfer"]["per_seed"] == pytest.approx({1: 0.001})
