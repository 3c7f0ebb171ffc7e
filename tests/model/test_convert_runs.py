"""Every fine-tuned run converts to every format that can hold it (issue 38, point 5).

A run's checkpoint holds the layers of its model, and nothing else: a tagger and a span model
have no pooler (their heads read every position, not the pooled [CLS]). Conversion writes what
the model has to the original TF1 layout, a Hugging Face folder and a .keras model; what the
target layout expects but the model never had (the pooler in the TF1 layout) is said in one log
line and does not stop it. The converted weights are read back and compared with the run's.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import convert_checkpoint
from bert_tf.model import checkpoints
from bert_tf.model import conversion
from bert_tf.model import heads
from bert_tf.tasks.tagging import run as tagging_run
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

SMALL = helpers.tiny_config(vocab_size=20, hidden_size=16, intermediate_size=8,
                            num_hidden_layers=1, max_position_embeddings=8)
POOLER = ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
CLASSES = ["austen", "bible", "linux"]
# head -> (the model its run trains, what the run records in task_info.json)
RUNS = {
    "tagger": (lambda: tagging_head.build_tagger_model(SMALL, len(TAGS)),
               dict(task_name="ner", labels=TAGS, tag_scheme="iob2", do_lower_case=True)),
    "squad": (lambda: squad_head.build_span_model(SMALL),
              dict(task_name="squad", do_lower_case=True)),
    "classifier": (lambda: classifier_head.build_classifier_model(SMALL, len(CLASSES)),
                   dict(task_name="generic", labels=CLASSES, regression=False,
                        do_lower_case=True)),
}
TARGETS = {"tf1": "model.ckpt", "hf": "model.safetensors", "keras": "model.keras"}
PROGRAM = "convert_checkpoint"


def write_run(root, head, step=7, seed=0):
  """A fine-tuning run's output_dir as the training loop leaves it: ckpt-<step> (the model's
  layers by name, the step; see loop.py), bert_config.json, vocab.txt and task_info.json.

  Returns:
    The run's weights under the original names (random values, none 0 or 1).
  """
  build, task_info = RUNS[head]
  model = build()
  rng = np.random.default_rng(seed)
  values = {name: (1.0 if name.endswith("gamma") else 0.0)
            + 0.2 * rng.standard_normal(value.shape).astype(np.float32)
            for name, value in checkpoints.get_original_weights(model).items()}
  checkpoints.set_original_weights(model, values)
  os.makedirs(root, exist_ok=True)
  checkpoint = tf.train.Checkpoint(model=checkpoints.checkpointable(model),
                                   step=tf.Variable(step, dtype=tf.int64))
  tf.train.CheckpointManager(checkpoint, str(root), max_to_keep=1).save(checkpoint_number=step)
  SMALL.to_json_file(str(root / "bert_config.json"))
  (root / "vocab.txt").write_text("\n".join(helpers.VOCAB_TOKENS[:SMALL.vocab_size]) + "\n")
  (root / "task_info.json").write_text(json.dumps(task_info))
  return values


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """head -> (run directory, its weights)."""
  root = tmp_path_factory.mktemp("runs")
  return {head: (str(root / head), write_run(root / head, head, seed=i))
          for i, head in enumerate(RUNS)}


def read_back(path, target_format):
  """The weights a converted file holds, under the original names, read from the file itself."""
  if target_format == "tf1":
    return checkpoints.read_tf1_checkpoint(path)
  if target_format == "hf":
    return checkpoints.read_hf_safetensors(path)
  return checkpoints.read_weights(path, source_format="keras")


def gap_lines(caplog):
  return [r.getMessage() for r in caplog.records if "written without" in r.getMessage()]


def convert(capsys, *args):
  """Runs the command in-process; returns (exit code, its error line or stdout)."""
  capsys.readouterr()
  code = helpers.run_cli_in_process(convert_checkpoint, [PROGRAM, *args])
  captured = capsys.readouterr()
  assert "Traceback" not in captured.err
  lines = [line for line in captured.err.splitlines() if line.startswith(f"{PROGRAM}: ")]
  return code, (lines[0] if lines else captured.out)


@pytest.mark.parametrize("target_format", list(TARGETS))
@pytest.mark.parametrize("head", list(RUNS))
def test_a_run_converts_to_every_format_with_what_its_model_has(runs, head, target_format,
                                                                  tmp_path, capsys, caplog):
  run_dir, values = runs[head]
  assert ("bert/pooler/dense/kernel" in values) == (head == "classifier")
  target = tmp_path / target_format / TARGETS[target_format]
  caplog.set_level("INFO")
  code, out = convert(capsys, f"--from={run_dir}", f"--to={target}")
  assert code == 0, out
  assert f"{head} head" in out
  back = read_back(str(target), target_format)
  # Exactly the run's weights: nothing lost, nothing made up (no pooler for the tagger / span).
  assert sorted(back) == sorted(values)
  for name, value in values.items():
    np.testing.assert_array_equal(back[name], value, err_msg=name)
  info = json.loads((target.parent / "task_info.json").read_text())
  assert info["head"] == head and info.get("labels") == RUNS[head][1].get("labels")
  # What the layout expects but the model never had: one line, and only for it.
  lines = gap_lines(caplog)
  if target_format == "tf1" and head in ("tagger", "squad"):
    assert len(lines) == 1, lines
    assert all(name in lines[0] for name in POOLER) and f"a {head} model" in lines[0]
    assert lines[0].startswith(f"{target}: ")
  else:
    assert not lines, lines


@pytest.mark.slow
@pytest.mark.parametrize("head", list(RUNS))
def test_the_converted_run_reads_back_as_the_same_model(runs, head, tmp_path, capsys, caplog):
  """Through --init_checkpoint's reader, each output gives the run's model its weights back,
  whatever it went through (run -> tf1 -> hf -> keras); the run itself loads and says so."""
  run_dir, values = runs[head]
  with caplog.at_level("INFO"):
    report = checkpoints.load_weights(RUNS[head][0](), run_dir)
  assert f"Loaded {run_dir}/ckpt-" in caplog.text and f"loaded {len(report.loaded)}" in caplog.text
  source = run_dir
  for target_format, name in TARGETS.items():
    target = str(tmp_path / target_format / name)
    code, out = convert(capsys, f"--from={source}", f"--to={target}", f"--vocab_file={run_dir}")
    assert code == 0, out
    model = RUNS[head][0]()
    report = checkpoints.load_weights(model, target)
    assert not report.missing and not report.mismatched, report.summary()
    got = checkpoints.get_original_weights(model)
    assert sorted(got) == sorted(values)
    for key, value in values.items():
      np.testing.assert_array_equal(got[key], value, err_msg=f"{target_format}: {key}")
    source = target


def test_layout_gaps_name_the_pooler_of_sequence_models_in_the_tf1_layout():
  for head, (build, _) in RUNS.items():
    model = build()
    assert conversion.layout_gaps(model, SMALL, "tf1") == (
        POOLER if head in ("tagger", "squad") else []), head
    assert conversion.layout_gaps(model, SMALL, "hf") == [], head
    assert conversion.layout_gaps(model, SMALL, "keras") == [], head
  for model in (heads.build_pretraining_model(SMALL),
                classifier_head.build_classifier_model(SMALL, None)):
    assert conversion.layout_gaps(model, SMALL, "tf1") == []


def test_a_tagger_checkpoint_builds_a_tagger(runs):
  """The tagger's layers have the classifier's names; its checkpoint has no pooler layer."""
  path = checkpoints.resolve_checkpoint(runs["tagger"][0])
  found = checkpoints.training_checkpoint_layers(path)
  assert "pooler" not in found and tagging_head.HEAD_LAYER in found
  model = checkpoints.build_model_like_checkpoint(path, SMALL, found)
  assert checkpoints.model_head(model) == tagging_head.TAGGER
  assert model.get_layer(tagging_head.HEAD_LAYER).kernel.shape == (16, len(TAGS))
  classifier_path = checkpoints.resolve_checkpoint(runs["classifier"][0])
  assert checkpoints.model_head(checkpoints.build_model_like_checkpoint(
      classifier_path, SMALL)) == classifier_head.CLASSIFIER


def test_a_classifier_initialized_from_a_tagger_run_gets_its_encoder(runs):
  """--init_checkpoint of a tagger run into a classifier: the encoder loads, the head and the
  pooler (which the run never had) keep their fresh values."""
  run_dir, values = runs["tagger"]
  classifier = classifier_head.build_classifier_model(SMALL, len(CLASSES))
  report = checkpoints.load_weights(classifier, run_dir)
  assert sorted(report.missing) == sorted(POOLER + ["output_bias", "output_weights"])
  got = checkpoints.get_original_weights(classifier)
  for name in report.loaded:
    np.testing.assert_array_equal(got[name], values[name], err_msg=name)


# === Real run_ner runs, with and without --init_checkpoint ===


@pytest.mark.slow
def test_run_ner_runs_convert_to_every_format(tmp_path, capsys, caplog):
  """The issue's case: run_ner fine-tuned from a tiny config without --init_checkpoint, then a
  run initialized from it; each converts to tf1, hf and keras with its weights."""
  ner = os.path.join(helpers.TEST_DATA, "ner")
  vocab = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
  config = helpers.tiny_config(vocab_size=30522, hidden_size=16, intermediate_size=8,
                               num_hidden_layers=1, max_position_embeddings=32)
  shared = dict(vocab_file=vocab, data_dir=ner, max_seq_length=32, train_batch_size=16,
                num_train_epochs=0.25, do_train=True, save_checkpoints_steps=5,
                iterations_per_loop=5, seed=1, export=False)
  first = str(tmp_path / "scratch")
  tagging_run.run_ner(config, tagging_run.NerSettings(output_dir=first, **shared))
  second = str(tmp_path / "init")
  tagging_run.run_ner(config, tagging_run.NerSettings(output_dir=second, init_checkpoint=first,
                                                      **shared))
  caplog.set_level("INFO")
  for run_dir in (first, second):
    values = checkpoints.read_weights(run_dir)
    assert "bert/pooler/dense/kernel" not in values and "output_weights" in values
    for target_format, name in TARGETS.items():
      caplog.clear()
      target = os.path.join(run_dir + "_converted", target_format, name)
      code, out = convert(capsys, f"--from={run_dir}", f"--to={target}",
                          f"--vocab_file={vocab}")
      assert code == 0, out
      assert "tagger head with labels ['O', 'I-LOC', 'I-PER']" in out
      back = read_back(target, target_format)
      assert sorted(back) == sorted(values)
      for key, value in values.items():
        np.testing.assert_array_equal(back[key], value, err_msg=f"{target}: {key}")
      assert len(gap_lines(caplog)) == (1 if target_format == "tf1" else 0)
