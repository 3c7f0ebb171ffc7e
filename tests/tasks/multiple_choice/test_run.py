"""run_multiple_choice end to end: learning, the written results and predictions, the command
line, bad input and the raw-text export."""

import csv
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import run_multiple_choice
from bert_tf import tokenization
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.tasks.multiple_choice import data as mc_data
from bert_tf.tasks.multiple_choice import export as mc_export
from bert_tf.tasks.multiple_choice import metrics as mc_metrics
from bert_tf.tasks.multiple_choice import run as mc_run
from bert_tf.training import evaluation
from bert_tf.training.errors import TrainingError
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
MC = os.path.join(helpers.TEST_DATA, "multiple_choice")
CONFIG = helpers.tiny_config(vocab_size=30522, max_position_embeddings=64,
                             hidden_dropout_prob=0.1)
SEQ = 48
TRAIN = os.path.join(MC, "train.csv")


def settings(output_dir, **changes):
  values = dict(output_dir=str(output_dir), vocab_file=VOCAB, data_dir=MC, max_seq_length=SEQ,
                train_batch_size=16, eval_batch_size=16, predict_batch_size=16,
                learning_rate=1e-3, num_train_epochs=3.0, seed=3, iterations_per_loop=100,
                save_checkpoints_steps=10000)
  values.update(changes)
  return mc_run.MultipleChoiceSettings(**values)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  out = tmp_path_factory.mktemp("mc") / "run"
  # Evaluated on its training file: a model this small from scratch learns to tell a
  # sentence's own ending from others' there (the val set's accuracy stays near chance).
  result = mc_run.run_multiple_choice(
      CONFIG, settings(out, do_train=True, do_eval=True, do_predict=True, eval_file=TRAIN),
      exporter=mc_export.EXPORTER)
  return out, result


def _read_predictions(path):
  with open(path, encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  assert rows[0] == ["guid", "choice"] + [f"probability_{i}" for i in range(4)]
  return rows[1:]


@pytest.mark.slow
def test_learns_the_true_endings_and_writes_what_it_scores(trained):
  out, result = trained
  assert result["num_choices"] == 4 and result["num_train_steps"] == 30
  assert result["eval_accuracy"] > 0.6, result  # chance is 0.25 (160 examples)
  examples = mc_data.read_examples(TRAIN)
  rows = _read_predictions(out / "eval_predictions.tsv")
  probs = np.array([[float(v) for v in row[2:]] for row in rows])
  np.testing.assert_allclose(probs, result["eval_probabilities"], rtol=1e-6)
  assert [int(row[1]) for row in rows] == list(np.argmax(probs, axis=1))
  written = evaluation.read_eval_results(str(out / "eval_results.txt"))
  expected = mc_metrics.eval_results(np.log(probs), [e.label for e in examples], 16)
  assert written["eval_accuracy"] == pytest.approx(expected["eval_accuracy"])
  assert written["eval_loss"] == pytest.approx(expected["eval_loss"], rel=1e-4)
  assert written["global_step"] == 30
  # The test split has no labels: predictions only.
  assert len(_read_predictions(out / "test_predictions.tsv")) == 40
  assert not (out / "test_results.txt").exists()
  info = json.loads((out / "task_info.json").read_text())
  assert info["head"] == "multiple_choice" and info["num_choices"] == 4


@pytest.mark.slow
def test_predicting_with_the_trained_run_from_the_command_line(trained, tmp_path):
  """The training file as --predict_file, scored by the command from the trained run, gives
  the trained run's eval probabilities (and its labels score it: test_results.txt)."""
  out, result = trained
  config_file = tmp_path / "bert_config.json"
  CONFIG.to_json_file(str(config_file))
  argv = ["run_multiple_choice", f"--vocab_file={VOCAB}", f"--bert_config_file={config_file}",
          f"--init_checkpoint={out}", f"--predict_file={TRAIN}",
          "--do_predict", f"--max_seq_length={SEQ}", "--predict_batch_size=16",
          "--packing=none", f"--output_dir={tmp_path / 'predict'}"]
  assert helpers.run_cli_in_process(run_multiple_choice, argv) == 0
  rows = _read_predictions(tmp_path / "predict" / "test_predictions.tsv")
  probs = np.array([[float(v) for v in row[2:]] for row in rows])
  np.testing.assert_allclose(probs, result["eval_probabilities"], atol=1e-5)
  written = evaluation.read_eval_results(str(tmp_path / "predict" / "test_results.txt"))
  assert written["test_accuracy"] == pytest.approx(result["eval_accuracy"])


def test_bad_input_stops_before_anything_is_written(tmp_path):
  bad = tmp_path / "train.jsonl"
  bad.write_text('{"context": "a", "choices": ["b", "c"], "label": 0}\n'
                 '{"context": "a", "choices": ["b", "c", "d"], "label": 0}\n')
  out = tmp_path / "out"
  with pytest.raises(TrainingError, match=r"train\.jsonl:2: 3 choices, but the file's first"):
    mc_run.run_multiple_choice(CONFIG, settings(out, data_dir=None, train_file=str(bad),
                                                do_train=True))
  assert not out.exists() or not any(out.iterdir())
  (tmp_path / "p.jsonl").write_text('{"context": "a", "choices": ["b", "c"]}\n')
  with pytest.raises(TrainingError, match="one number of choices: .*val.csv has 4, .* has 2"):
    mc_run.run_multiple_choice(CONFIG, settings(out, predict_file=str(tmp_path / "p.jsonl"),
                                                do_eval=True, do_predict=True))
  with pytest.raises(TrainingError, match="--packing=static would part an example's choices"):
    settings(out, do_train=True, packing="static").check(CONFIG)


@pytest.mark.slow
def test_the_export_chooses_as_the_run_did(trained):
  out, result = trained
  (path,) = [os.path.join(root, d) for root, dirs, _ in os.walk(out / "export" / "multiple_choice")
             for d in dirs if d.isdigit()]
  loaded = tf.saved_model.load(path)
  assert sorted(loaded.signatures) == ["serving_default"]
  examples = mc_data.read_examples(TRAIN)
  serve = loaded.signatures["serving_default"]
  got = serve(context=tf.constant([e.context for e in examples]),
              choices=tf.constant([[e.choice_text(c) for c in e.endings] for e in examples]))
  np.testing.assert_allclose(got["probabilities"].numpy(), result["eval_probabilities"],
                             atol=1e-5)
  np.testing.assert_array_equal(got["choice"].numpy(),
                                np.argmax(result["eval_probabilities"], axis=1))
  one = serve(context=tf.constant([examples[3].context]), choices=tf.constant(
      [[examples[3].choice_text(c) for c in examples[3].endings]]))
  np.testing.assert_allclose(one["probabilities"].numpy()[0], result["eval_probabilities"][3],
                             atol=1e-5)
  assert helpers.assert_empty_requests_give_empty_results(loaded) == 1
  # An empty choice is a pair, [CLS] context [SEP] [SEP], as the records lay it out (a text
  # long enough to be truncated too): the export's scores are the model's on the records.
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  example = mc_data.Example("x", examples[5].context * 6, "",
                            ("", "   ", examples[5].endings[0], "."))
  features = mc_data.example_features(example, tokenizer, SEQ)
  rows = {key: tf.reshape(tf.constant(features[field], tf.int32), [4, SEQ])
          for key, field in zip(ENCODER_INPUTS, mc_data.SEQUENCE_FIELDS)}
  logits = result["model"](rows, training=False)["logits"].numpy().reshape(1, 4)
  got = serve(context=tf.constant([example.context]), choices=tf.constant([example.endings]))
  np.testing.assert_allclose(got["probabilities"].numpy(), mc_metrics.probabilities(logits),
                             atol=1e-5)
  # choices that do not line up with the contexts, or no choice at all, are refused.
  with pytest.raises(tf.errors.InvalidArgumentError, match="one row per context"):
    serve(context=tf.constant(["a", "b"]), choices=tf.constant([["c", "d"]]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="at least one choice"):
    serve(context=tf.constant(["a"]), choices=tf.zeros([1, 0], tf.string))
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"tensor choices \[2\] is not"):
    serve(context=tf.constant(["a"]), choices=tf.constant(["c", "d"]))
  # The README's REST request, as TF Serving's row format feeds it.
  readme = open(os.path.join(helpers.REPO_ROOT, "README.md"), encoding="utf-8").read()
  (body,) = re.findall(r"models/multiple_choice:predict -d '(\{.*?\})'\n", readme)
  instances = json.loads(body)["instances"]
  out = serve(context=tf.constant([row["context"] for row in instances]),
              choices=tf.constant([row["choices"] for row in instances]))
  assert out["probabilities"].shape == (len(instances), len(instances[0]["choices"]))
  np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_seeds_run_once_per_seed_and_summarise(tmp_path):
  """--seeds, as run_classifier's: one run per seed in seed_<s>/, mean +- std of their dev
  results in seeds_summary.txt; refused beside --seed."""
  data = tmp_path / "train.jsonl"
  data.write_text("".join(json.dumps(dict(context=f"the {w} sat", choices=[w, "tree", "x"],
                                          label=0)) + "\n"
                          for w in ["cat", "dog", "man", "hen", "cow", "fox", "owl", "pig"]))
  config_file = tmp_path / "bert_config.json"
  CONFIG.to_json_file(str(config_file))
  argv = ["run_multiple_choice", f"--vocab_file={VOCAB}", f"--bert_config_file={config_file}",
          f"--train_file={data}", f"--eval_file={data}", "--do_train", "--do_eval",
          "--max_seq_length=16", "--train_batch_size=4", "--num_train_epochs=1",
          "--learning_rate=1e-3", "--seeds=1,2", "--noexport", f"--output_dir={tmp_path / 'out'}"]
  assert helpers.run_cli_in_process(run_multiple_choice, argv) == 0
  runs = [evaluation.read_eval_results(str(tmp_path / "out" / f"seed_{s}" / "eval_results.txt"))
          for s in (1, 2)]
  summary = (tmp_path / "out" / "seeds_summary.txt").read_text()
  mean = np.mean([r["eval_loss"] for r in runs])
  std = np.std([r["eval_loss"] for r in runs], ddof=1)
  assert f"eval_loss = {mean:.6f} +- {std:.6f}" in summary
  assert "seeds = 1,2" in summary
  assert runs[0]["eval_loss"] != runs[1]["eval_loss"]
  assert helpers.run_cli_in_process(run_multiple_choice, argv + ["--seed=3"]) != 0
