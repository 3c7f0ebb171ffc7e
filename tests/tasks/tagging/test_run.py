"""run_ner end to end: learning, the written predictions and scores, the raw-text export, the
command line and bad input."""

import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import run_ner
from bert_tf.model import checkpoints
from bert_tf.tasks import start as start_lib
from bert_tf.tasks.tagging import data as tagging_data
from bert_tf.tasks.tagging import export as tagging_export
from bert_tf.tasks.tagging import metrics as tagging_metrics
from bert_tf.tasks.tagging import run as tagging_run
from bert_tf.training import evaluation
from bert_tf.training.errors import TrainingError
from bert_tf.tasks.tagging import head as tagging_head
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
NER = os.path.join(helpers.TEST_DATA, "ner")
# A small model that learns the names from scratch; max_seq_length 32 cuts a third of the
# fixture's sentences into several windows, so that path is exercised everywhere.
CONFIG = helpers.tiny_config(vocab_size=30522, max_position_embeddings=64,
                             hidden_dropout_prob=0.1)
SEQ = 32


def settings(output_dir, **changes):
  values = dict(output_dir=str(output_dir), vocab_file=VOCAB, data_dir=NER,
                max_seq_length=SEQ, train_batch_size=16, eval_batch_size=16,
                predict_batch_size=16, learning_rate=1e-3, num_train_epochs=6.0, seed=3,
                iterations_per_loop=100, save_checkpoints_steps=10000)
  values.update(changes)
  return tagging_run.NerSettings(**values)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  out = tmp_path_factory.mktemp("ner") / "run"
  result = tagging_run.run_ner(CONFIG, settings(out, do_train=True, do_eval=True,
                                                do_predict=True),
                               exporter=tagging_export.EXPORTER)
  return out, result


@pytest.mark.slow
def test_learns_the_names_and_writes_what_it_scores(trained):
  out, result = trained
  assert result["labels"] == ["O", "I-LOC", "I-PER"] and result["scheme"] == "iob1"
  assert result["eval"]["f1"] > 0.8, result["eval"]
  assert result["test"]["f1"] > 0.8, result["test"]
  for name in ("eval", "test"):
    # conlleval on the written file gives the scores run_ner reports.
    gold, predicted = tagging_metrics.read_conll_predictions(str(out / f"{name}_predictions.txt"))
    scores = tagging_metrics.evaluate(gold, predicted)
    assert predicted == result[f"{name}_predictions"]
    assert (out / f"{name}_conlleval.txt").read_text() == tagging_metrics.conlleval_report(scores)
    written = evaluation.read_eval_results(str(out / f"{name}_results.txt"))
    assert written[f"{name}_f1"] == pytest.approx(scores["f1"])
    assert written[f"{name}_precision_PER"] == pytest.approx(scores["per_type"]["PER"]["precision"])
    assert written[f"{name}_correct_entities"] == scores["correct_entities"]
    sentences = tagging_data.read_conll(os.path.join(NER, "dev.txt" if name == "eval"
                                                     else "test.txt"))
    assert gold == [list(s.tags) for s in sentences]
  info = json.loads((out / "task_info.json").read_text())
  assert info["labels"] == ["O", "I-LOC", "I-PER"] and info["tag_scheme"] == "iob1"


@pytest.mark.slow
def test_predicting_with_the_trained_run_from_the_command_line(trained, tmp_path, caplog):
  """Labels come from the run's task_info.json; a predict file without tags gets `word tag`
  lines equal to the trained run's predictions."""
  out, result = trained
  sentences = tagging_data.read_conll(os.path.join(NER, "test.txt"))
  untagged = tmp_path / "untagged.txt"
  untagged.write_text("\n\n".join("\n".join(s.words) for s in sentences) + "\n")
  config_file = tmp_path / "bert_config.json"
  CONFIG.to_json_file(str(config_file))
  argv = ["run_ner", f"--vocab_file={VOCAB}", f"--bert_config_file={config_file}",
          f"--init_checkpoint={out}", f"--predict_file={untagged}", "--do_predict",
          f"--max_seq_length={SEQ}", "--predict_batch_size=16",
          f"--output_dir={tmp_path / 'predict'}"]
  assert helpers.run_cli_in_process(run_ner, argv) == 0
  lines = (tmp_path / "predict" / "test_predictions.txt").read_text().split("\n\n")
  tags = [[line.split(" ")[1] for line in block.split("\n")] for block in lines if block.strip()]
  assert tags == result["test_predictions"]
  assert not (tmp_path / "predict" / "test_results.txt").exists()
  # Every window at max_seq_length (--length_buckets=none): the same tags and scores as
  # windows cut to their length buckets.
  fixed = tagging_run.run_ner(CONFIG, settings(tmp_path / "fixed", init_checkpoint=str(out),
                                               do_eval=True, do_predict=True,
                                               length_buckets="none"))
  assert fixed["test_predictions"] == result["test_predictions"]
  assert fixed["eval_predictions"] == result["eval_predictions"]
  assert fixed["eval"]["f1"] == result["eval"]["f1"]
  # Plain tags (POS-like: no entities): the summary gives the token accuracy only.
  with caplog.at_level(logging.INFO):
    assert helpers.run_cli_in_process(run_ner, argv[:4] + [
        f"--data_dir={NER}", "--do_eval", "--tag_scheme=plain", f"--max_seq_length={SEQ}",
        f"--output_dir={tmp_path / 'plain'}"]) == 0
  assert re.search(r"eval: token accuracy 0\.\d{4}$", caplog.text, re.M), caplog.text[-2000:]
  assert "eval: precision" not in caplog.text


def test_bad_input_stops_before_anything_is_written(tmp_path):
  train = tmp_path / "train.txt"
  train.write_text("John I-PER\nran O\n\nMary I-PER\n")
  dev = tmp_path / "dev.txt"
  dev.write_text("Paris I-LOC\n")
  out = tmp_path / "out"
  with pytest.raises(TrainingError, match=r"dev.txt:1: tag 'I-LOC'.*--labels"):
    tagging_run.run_ner(CONFIG, settings(out, data_dir=None, train_file=str(train),
                                         eval_file=str(dev), do_train=True, do_eval=True))
  assert not out.exists()
  dev.write_text("Paris\tNNP\tI-LOC\nis O\n")
  with pytest.raises(TrainingError, match=r"dev.txt:2: 2 columns"):
    tagging_run.run_ner(CONFIG, settings(out, data_dir=None, eval_file=str(dev), do_eval=True,
                                         labels=("O", "I-LOC")))
  with pytest.raises(TrainingError, match="no labels"):
    tagging_run.run_ner(CONFIG, settings(out, data_dir=None, predict_file=str(train),
                                         do_predict=True))
  with pytest.raises(TrainingError, match="strict needs the IOB2 or IOBES scheme; the "
                     "tags are iob1"):
    tagging_run.run_ner(CONFIG, settings(out, data_dir=None, train_file=str(train),
                                         do_train=True, eval_mode="strict"))
  with pytest.raises(TrainingError, match="--do_eval needs --eval_file or --data_dir"):
    tagging_run.run_ner(CONFIG, settings(out, data_dir=None, do_eval=True))
  with pytest.raises(TrainingError, match="was never trained"):
    tagging_run.run_ner(CONFIG, settings(out, data_dir=None, predict_file=str(train),
                                         do_predict=True, labels=("O", "I-PER")))
  assert not out.exists()


def test_the_tagger_head_is_output_weights_in_every_format(tmp_path):
  """Hugging Face's BertForTokenClassification names its head classifier.*, which the
  converters map to output_weights / output_bias: a tagger saved as safetensors loads back."""
  model = tagging_head.build_tagger_model(CONFIG.replace(vocab_size=99), 5)
  weights = checkpoints.get_original_weights(model)
  assert weights["output_weights"].shape == (5, 64) and weights["output_bias"].shape == (5,)
  path = checkpoints.save_hf_safetensors(model, str(tmp_path / "model.safetensors"))
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  assert {"classifier.weight", "classifier.bias"} <= set(load_file(path))
  again = tagging_head.build_tagger_model(CONFIG.replace(vocab_size=99), 5)
  report = checkpoints.load_weights(again, path)
  assert not report.missing and not report.mismatched
  inputs = dict(input_word_ids=np.arange(12, dtype=np.int32).reshape(2, 6) % 99,
                input_mask=np.ones([2, 6], np.int32), input_type_ids=np.zeros([2, 6], np.int32))
  np.testing.assert_allclose(model(inputs)["logits"], again(inputs)["logits"], atol=1e-6)


# === The export ===


def _char_spans(sentence_words):
  text = " ".join(sentence_words)
  spans, at = [], 0
  for word in sentence_words:
    spans.append((at, at + len(word)))
    at += len(word) + 1
  return text, spans


@pytest.fixture(scope="module")
def export(trained):
  out, result = trained
  path = result["export_dir"]
  assert path == str(out / "export" / "ner" / str(result["global_step"]))
  return path, result


@pytest.mark.slow
def test_the_export_tags_raw_text_as_the_written_predictions(export):
  path, result = export
  sentences = tagging_data.read_conll(os.path.join(NER, "test.txt"))
  loaded = tf.saved_model.load(path)
  texts, spans = zip(*(_char_spans(s.words) for s in sentences))
  out = {k: v.numpy() for k, v in loaded.signatures["serving_default"](
      text=tf.constant(list(texts))).items()}
  check_outputs(out, sentences, texts, spans, result["test_predictions"])
  assert sorted(loaded.signatures) == ["serving_default", "tag"]
  # A 0-row batch gets 0-row answers in every signature.
  assert helpers.assert_empty_requests_give_empty_results(loaded) == 2
  info = json.loads(open(os.path.join(path, "assets", "export_info.json")).read())
  assert info["labels"] == ["O", "I-LOC", "I-PER"] and info["seq_length"] == SEQ


def check_outputs(out, sentences, texts, spans, predictions):
  n_entities = 0
  for i, sentence in enumerate(sentences):
    n = int(out["num_words"][i])
    assert [w.decode() for w in out["words"][i][:n]] == list(sentence.words)
    assert [t.decode() for t in out["tags"][i][:n]] == predictions[i]
    assert list(zip(out["word_start"][i][:n], out["word_end"][i][:n])) == spans[i]
    expected = tagging_metrics.entities(predictions[i])
    m = int(out["num_entities"][i])
    got = [(out["entity_type"][i][j].decode(), int(out["entity_start"][i][j]),
            int(out["entity_end"][i][j]), out["entity_text"][i][j].decode()) for j in range(m)]
    want = [(kind, spans[i][a][0], spans[i][b - 1][1],
             texts[i][spans[i][a][0]:spans[i][b - 1][1]]) for kind, a, b in expected]
    assert got == want
    n_entities += m
    assert np.all(out["tag_probability"][i][:n] > 0.3)
  assert n_entities > len(sentences) // 3


@pytest.mark.slow
def test_the_export_loads_with_tensorflow_and_tensorflow_text_only(export, tmp_path):
  path, result = export
  sentences = tagging_data.read_conll(os.path.join(NER, "test.txt"))[:30]
  texts, spans = zip(*(_char_spans(s.words) for s in sentences))
  spec = dict(ops=[path], requests=[dict(model=path, signature="tag",
                                         inputs=dict(text=list(texts)))])
  (tmp_path / "requests.json").write_text(json.dumps(spec))
  env = helpers.subprocess_env()
  env.pop("PYTHONPATH", None)
  script = os.path.join(helpers.REPO_ROOT, "tests", "serving", "serving_subprocess_check.py")
  done = subprocess.run([sys.executable, script, str(tmp_path / "requests.json"), str(tmp_path)],
                        env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  # Every served output's shape is known to the graph (Grappler's cost model warns otherwise).
  assert "PredictCost" not in done.stderr, done.stderr[-3000:]
  report = json.load(open(tmp_path / "report.json"))
  assert report["bert_tf_modules"] == [] and report["models"][path]["unknown"] == []
  outputs = np.load(tmp_path / "outputs.npz", allow_pickle=True)
  out = {key.split("/", 1)[1]: outputs[key] for key in outputs.files}
  check_outputs(out, sentences, texts, spans, result["test_predictions"][:30])


@pytest.mark.slow
def test_export_words_offsets_and_entities_on_hard_text(tmp_path):
  """Raw text the CoNLL files never show: punctuation inside words, several spaces, tabs,
  non-ASCII, a control character inside a word, an empty text; entities by conlleval's rules
  on fixed tags (a head whose bias decides every tag)."""
  from bert_tf.tasks.tagging import serving_module as tagger_module  # pylint: disable=g-import-not-at-top
  labels = ["O", "B-PER", "I-PER", "S-LOC"]
  model = tagging_head.build_tagger_model(CONFIG, len(labels))
  module = tagger_module.TaggerModule(_tokenizer(), model, 16, labels)
  texts = ["Dr. Émile\tZola  went\u00a0to U.S.A.", "", "ab\x07cd!", "x " * 40]
  out = {k: v.numpy() for k, v in module.tag(tf.constant(texts)).items()}
  words0 = [w.decode() for w in out["words"][0][:out["num_words"][0]]]
  assert words0 == ["Dr", ".", "Émile", "Zola", "went", "to", "U", ".", "S", ".", "A", "."]
  starts = out["word_start"][0][:len(words0)].tolist()
  assert [texts[0][s:e] for s, e in zip(starts, out["word_end"][0][:len(words0)])] == words0
  assert out["num_words"].tolist() == [12, 0, 2, 40]
  assert [w.decode() for w in out["words"][2][:2]] == ["ab\x07cd", "!"]
  # 40 words need several windows at seq_length 16: every word is still tagged.
  assert all(t.decode() in labels for t in out["tags"][3][:40])
  # Entities follow tagging_metrics.entities for whatever tags came out.
  for i, text in enumerate(texts):
    n = out["num_words"][i]
    tags = [t.decode() for t in out["tags"][i][:n]]
    expected = tagging_metrics.entities(tags)
    got = [(out["entity_type"][i][j].decode(), out["entity_start"][i][j], out["entity_end"][i][j])
           for j in range(out["num_entities"][i])]
    assert got == [(k, out["word_start"][i][a], out["word_end"][i][b - 1]) for k, a, b in expected]


def _tokenizer():
  from bert_tf.text import InGraphTokenizer  # pylint: disable=g-import-not-at-top
  return InGraphTokenizer(VOCAB, do_lower_case=True)


@pytest.mark.slow
def test_the_readmes_rest_request_runs_on_the_export(export):
  """The README's curl body for the tagger, as TF Serving's REST row format feeds it."""
  import re  # pylint: disable=g-import-not-at-top
  path, _ = export
  readme = open(os.path.join(helpers.REPO_ROOT, "README.md"), encoding="utf-8").read()
  bodies = re.findall(r"models/ner:predict -d '(\{.*?\})'\n", readme)
  assert len(bodies) == 1
  instances = json.loads(bodies[0])["instances"]
  loaded = tf.saved_model.load(path)
  out = loaded.signatures["serving_default"](
      text=tf.constant([row["text"] for row in instances]))
  words = [w.decode() for w in out["words"].numpy()[0][:int(out["num_words"][0])]]
  assert words == ["Elizabeth", "Bennet", "left", "London", "for", "Bath", "."]
  assert int(out["num_entities"][0]) >= 1


# === A fine-tuned model is used with its own labels and head (issue 28) ===


def _fine_tuned(directory, labels, task_name):
  """An original TF1 checkpoint with a head of len(labels) outputs and our task_info.json."""
  from bert_tf import record_schema  # pylint: disable=g-import-not-at-top
  values = helpers.random_original_weights(CONFIG, np.random.default_rng(0))
  values["output_weights"] = np.ones([len(labels), CONFIG.hidden_size], np.float32)
  values["output_bias"] = np.zeros([len(labels)], np.float32)
  prefix = checkpoints.write_tf1_checkpoint(values, str(directory / "model.ckpt"))
  (directory / "task_info.json").write_text(json.dumps(dict(
      task_name=task_name, labels=list(labels), do_lower_case=True, max_seq_length=SEQ,
      vocab_md5=record_schema.vocab_checksum(VOCAB))))
  return prefix


def test_a_classifier_is_never_used_as_a_tagger(tmp_path):
  """K14: a classifier run's head (2 labels) is refused as a tagger's for prediction, even
  with --labels of the same count; nothing is written."""
  prefix = _fine_tuned(tmp_path / "clf", ["neg", "pos"], "generic")
  out = tmp_path / "out"
  for labels in ((), ("O", "I-PER")):
    with pytest.raises(TrainingError, match=r"holds a classifier head .*not a tagger's"):
      tagging_run.run_ner(CONFIG, settings(out, do_predict=True, init_checkpoint=prefix,
                                           labels=labels))
  assert not out.exists()


def test_reordered_labels_of_a_fine_tuned_tagger_are_refused(tmp_path):
  """N16: the model's labels are its task_info.json's; --labels in another order (or other
  tags) is refused naming both lists."""
  prefix = _fine_tuned(tmp_path / "ner", ["O", "I-LOC", "I-PER"], "ner")
  out = tmp_path / "out"
  for labels in (("O", "I-PER", "I-LOC"), ("O", "I-LOC", "I-PER", "I-ORG")):
    with pytest.raises(TrainingError, match=r"--labels gives the labels \[" +
                       ", ".join(labels) + r"\], but the model in .*task_info.json was trained "
                       r"with \[O, I-LOC, I-PER\]"):
      tagging_run.run_ner(CONFIG, settings(out, do_eval=True, init_checkpoint=prefix,
                                           labels=labels))
  # Labels read from --labels_file: the messages name that flag and its file.
  with pytest.raises(TrainingError, match=r"--labels_file=tags.txt gives the labels \[O, "
                     r"I-PER, I-LOC\].*give --labels=O,I-LOC,I-PER or drop --labels_file$"):
    tagging_run.run_ner(CONFIG, settings(out, do_eval=True, init_checkpoint=prefix,
                                         labels=("O", "I-PER", "I-LOC"), labels_file="tags.txt"))
  assert not out.exists()
  given = settings(out, do_eval=True, init_checkpoint=prefix)
  start = tagging_run._labels(given, start_lib.find_start(given), dict(
      train=None, eval=None, predict=None))
  assert start.labels == ["O", "I-LOC", "I-PER"] and start.fresh_head is None


@pytest.mark.slow
def test_scores_of_a_previous_run_are_removed_when_this_one_has_none(tmp_path):
  """S5: predicting an untagged file removes the test_results.txt / test_conlleval.txt an
  earlier run left; the predictions use the fine-tuned model's labels."""
  prefix = _fine_tuned(tmp_path / "ner", ["O", "I-LOC", "I-PER"], "ner")
  sentences = tagging_data.read_conll(os.path.join(NER, "test.txt"))[:5]
  untagged = tmp_path / "untagged.txt"
  untagged.write_text("\n\n".join("\n".join(s.words) for s in sentences) + "\n")
  out = tmp_path / "out"
  out.mkdir()
  for name in ("test_results.txt", "test_conlleval.txt"):
    (out / name).write_text("test_f1 = 0.99\n")
  result = tagging_run.run_ner(CONFIG, settings(out, data_dir=None, do_predict=True,
                                                predict_file=str(untagged),
                                                init_checkpoint=prefix))
  assert "test" not in result and result["labels"] == ["O", "I-LOC", "I-PER"]
  assert not (out / "test_results.txt").exists() and not (out / "test_conlleval.txt").exists()
  assert (out / "test_predictions.txt").exists()


def test_an_output_that_is_an_input_is_refused(tmp_path):
  """Issue 28.4: --predict_file naming the test_predictions.txt the run writes (here through
  a ./ spelling and a symlinked folder) is refused before anything is written."""
  prefix = _fine_tuned(tmp_path / "ner", ["O", "I-LOC", "I-PER"], "ner")
  out = tmp_path / "out"
  out.mkdir()
  predictions = out / "test_predictions.txt"
  predictions.write_text("John I-PER\nran O\n")
  (tmp_path / "alias").symlink_to(out)
  for spelling in (f"{out}/./test_predictions.txt", str(tmp_path / "alias" /
                                                        "test_predictions.txt")):
    with pytest.raises(TrainingError, match=r"--predict_file=.* is test_predictions.txt, "
                       "an output in --output_dir"):
      tagging_run.run_ner(CONFIG, settings(out, data_dir=None, do_predict=True,
                                           predict_file=spelling, init_checkpoint=prefix))
  assert sorted(p.name for p in out.iterdir()) == ["test_predictions.txt"]
  assert predictions.read_text() == "John I-PER\nran O\n"
