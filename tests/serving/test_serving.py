"""Tests of bert_tf.serving and bert_tf.packing: the TF Serving exports, checked without the
server binary.

One export (written by the real command line from a TF1 checkpoint of a tiny random model) is
shared by every test. A fresh subprocess that imports only tensorflow and tensorflow_text loads
it and its outputs are compared with the in-process Keras model fed by the Python tokenizer.
"""

import base64
import contextlib
import io
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
# What `saved_model_cli show` prints (test_saved_model_cli_lists_the_signatures).
from tensorflow.python.tools import saved_model_cli  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.tools import saved_model_utils  # pylint: disable=g-direct-tensorflow-import

from bert_tf import packing
from bert_tf.serving import saved_model
from bert_tf.serving import tf_serving
from bert_tf.config import BertConfig

from tests import helpers
from tests.helpers import REPO_ROOT, TEST_DATA, protobuf_fields

from tests.serving import shared
from tests.serving.shared import CONFIG, METADATA, SEQ_LENGTH, TOP_K, VOCAB

REQUESTS = os.path.join(TEST_DATA, "serving_requests.json")

# Texts of the parity checks: ordinary, empty, longer than SEQ_LENGTH, non-ASCII, and a word
# that the tokenizer splits into pieces.
TEXTS = ["The man went to the store.", "", "word " * 40 + "end", "Café naïve 東京 déjà-vu!",
         "unaffable embeddings"]
TEXTS_B = ["He bought a gallon of milk.", "Penguins are flightless.", "", "short " * 30, ""]
MASK_TEXTS = ["The man went to the [MASK].", "[MASK] [MASK] bought a [MASK]!",
              "No mask here.", "", "long " * 40 + "[MASK]", "[MASK]"]


# === References in plain Python ===


def original_truncate(a, b, max_length):
  """The original run_classifier.py truncation loop, rewritten: pop from the longer (B on ties)."""
  a, b = list(a), list(b)
  while len(a) + len(b) > max_length:
    if len(a) > len(b):
      a.pop()
    else:
      b.pop()
  return a, b


def python_pack(tokenizer, ids_a, ids_b, seq_length):
  vocab = tokenizer.vocab
  if ids_b:
    ids_a, ids_b = original_truncate(ids_a, ids_b, seq_length - 3)
  else:
    ids_a = ids_a[:seq_length - 2]
  ids = [vocab["[CLS]"]] + ids_a + [vocab["[SEP]"]]
  types = [0] * len(ids)
  if ids_b:
    ids += ids_b + [vocab["[SEP]"]]
    types += [1] * (len(ids_b) + 1)
  pad = seq_length - len(ids)
  return ids + [0] * pad, [1] * len(ids) + [0] * pad, types + [0] * pad


def python_tokenize_with_masks(tokenizer, text):
  pieces = text.split("[MASK]")
  ids = []
  for i, piece in enumerate(pieces):
    ids += tokenizer.tokenize_to_ids(piece)
    if i < len(pieces) - 1:
      ids.append(tokenizer.vocab["[MASK]"])
  return ids


def softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def loaded_text(exported):
  return tf.saved_model.load(exported[0]["text"])


def _b64(data: bytes):
  return {"b64": base64.b64encode(data).decode("ascii")}


# === Packing ===


def test_truncated_lengths_equals_the_original_loop():
  cases = [(la, lb, s) for la in range(0, 9) for lb in range(0, 9) for s in range(3, 12)]
  len_a, len_b, seq = (tf.constant(c, tf.int32) for c in zip(*cases))
  kept_a, kept_b = packing.truncated_lengths(len_a, len_b, seq)
  for (la, lb, s), ka, kb in zip(cases, kept_a.numpy(), kept_b.numpy()):
    if lb:
      a, b = original_truncate(range(la), range(lb), s - 3)
    else:
      a, b = list(range(la))[:s - 2], []
    assert (ka, kb) == (len(a), len(b)), (la, lb, s)


def test_pack_lays_out_every_row_as_the_original_for_every_width_rule():
  """Packer.pack against python_pack on random rows (empty, short, over the budget; single
  texts and pairs; a length per row), padded by each rule: the longest seq_length, a static
  width, a width tensor, and the length bucket of the longest packed row."""
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  vocab = os.path.join(TEST_DATA, "vocab_uncased.txt")
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  rng = np.random.default_rng(4)
  rows = 300
  ids_a = [list(rng.integers(1000, 2000, rng.integers(0, 10))) for _ in range(rows)]
  ids_b = [list(rng.integers(2000, 3000, rng.integers(0, 10))) if rng.random() < 0.6 else []
           for _ in range(rows)]
  seq = [int(rng.integers(3, 13)) for _ in range(rows)]
  expected = [python_pack(tokenizer, a, b, s) for a, b, s in zip(ids_a, ids_b, seq)]

  def ragged(rows_of_ids):
    return tf.ragged.constant(rows_of_ids, dtype=tf.int32, ragged_rank=1,
                              row_splits_dtype=tf.int64)

  def check(got, width, packed=expected):
    """got holds the rows of `packed` (python_pack's), cut or padded to `width`."""
    for column, name in enumerate(("input_word_ids", "input_mask", "input_type_ids")):
      want = [(row[column] + [0] * width)[:width] for row in packed]
      np.testing.assert_array_equal(got[name].numpy(), np.reshape(want, [len(packed), width]),
                                    err_msg=name)

  plain = packing.Packer(vocab, True, 16)
  args = ragged(ids_a), ragged(ids_b), tf.constant(seq, tf.int32)
  check(plain.pack(*args), max(seq))
  check(plain.pack(*args, pad_to=14), 14)
  assert plain.pack(*args, pad_to=14)["input_word_ids"].shape.as_list() == [rows, 14]
  check(plain.pack(*args, pad_to=tf.constant(13)), 13)
  bucketed = packing.Packer(vocab, True, 16, length_buckets=(4, 8))
  for take in (slice(0, 1), slice(0, 40), slice(None)):
    part = [sum(e[1]) for e in expected[take]]
    width = min(b for b in (4, 8, 16) if b >= max(part))
    check(bucketed.pack(ragged(ids_a[take]), ragged(ids_b[take]),
                        tf.constant(seq[take], tf.int32), pad_to=16), width, expected[take])
  # Single texts (no B at all) and an empty batch.
  singles = [python_pack(tokenizer, a, [], s) for a, s in zip(ids_a, seq)]
  check(plain.pack(ragged(ids_a), None, tf.constant(seq, tf.int32), pad_to=12), 12, singles)
  check(plain.pack(ragged([]), None, tf.zeros([0], tf.int32)), 0, [])


# === Layout, assets, versions ===


@pytest.mark.slow
def test_layout_assets_and_versions(exported):
  paths, _, _, root = exported
  for kind, path in paths.items():
    assert tf.saved_model.contains_saved_model(path)
    with open(os.path.join(path, "assets", "vocab.txt")) as f, open(VOCAB) as g:
      assert f.read() == g.read()
    assert BertConfig.from_json_file(os.path.join(path, "assets", "bert_config.json")) == CONFIG
    with open(os.path.join(path, "assets", "data_metadata.json")) as f:
      assert json.load(f) == METADATA
    with open(os.path.join(path, "assets", "export_info.json")) as f:
      info = json.load(f)
    assert (info["kind"], info["seq_length"], info["top_k"]) == (kind, SEQ_LENGTH, TOP_K)
    assert os.path.getsize(os.path.join(path, "assets.extra", tf_serving.WARMUP_FILE)) > 0
    # Only the version directory: no temporary left beside it.
    assert os.listdir(os.path.dirname(path)) == ["3"]
  assert tf_serving.next_version(os.path.dirname(paths["text"])) == 4
  assert tf_serving.next_version(str(root / "nothing")) == 1


@pytest.mark.slow
def test_existing_version_is_an_error(exported):
  paths, model, _, root = exported
  with pytest.raises(FileExistsError, match="already exists"):
    tf_serving._save_version(tf.Module(), {}, os.path.dirname(paths["text"]), 3, {}, (), "bert")


# === Fresh process: parity with Keras, op check ===


@pytest.mark.slow
def test_fresh_process_outputs_equal_keras_and_ops_are_servable(exported, tmp_path):
  paths, model, tokenizer, _ = exported
  vocab = tokenizer.vocab
  lengths = [SEQ_LENGTH, 3, 9, 40, 12]
  requests = [
      dict(model=paths["preprocessor"], signature="serving_default", inputs=dict(text=TEXTS)),
      dict(model=paths["preprocessor"], signature="preprocess",
           inputs=dict(text=TEXTS, text_b=TEXTS_B, seq_length=lengths)),
      dict(model=paths["text"], signature="serving_default", inputs=dict(text=TEXTS)),
      dict(model=paths["text"], signature="encode",
           inputs=dict(text=TEXTS, text_b=TEXTS_B, seq_length=lengths)),
      dict(model=paths["text"], signature="fill_mask", inputs=dict(text=MASK_TEXTS)),
      dict(model=paths["text"], signature="next_sentence",
           inputs=dict(text=TEXTS, text_b=TEXTS_B)),
  ]
  # The encoder gets the Python packing of TEXTS (dynamic batch and length: 5 x 11).
  packed = [python_pack(tokenizer, tokenizer.tokenize_to_ids(t), [], 11) for t in TEXTS]
  encoder_inputs = {name: [p[i] for p in packed]
                    for i, name in enumerate(("input_word_ids", "input_mask", "input_type_ids"))}
  requests.append(dict(model=paths["encoder"], signature="serving_default",
                       inputs=encoder_inputs))
  spec_file = tmp_path / "requests.json"
  spec_file.write_text(json.dumps(dict(ops=list(paths.values()), requests=requests)))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("PYTHONPATH", None)
  result = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "tests", "serving", "serving_subprocess_check.py"),
       str(spec_file), str(tmp_path)], cwd=str(tmp_path), env=env, capture_output=True,
      text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  # Every served output's shape is known to the graph (Grappler's cost model warns otherwise).
  assert "PredictCost" not in result.stderr, result.stderr[-3000:]
  out = np.load(tmp_path / "outputs.npz", allow_pickle=True)
  with open(tmp_path / "report.json") as f:
    report = json.load(f)
  assert report["bert_tf_modules"] == []

  # Ops: core TensorFlow or tensorflow-text, nothing else; the tokenizer needs tf-text's ops.
  for path, ops in report["models"].items():
    assert ops["unknown"] == [], path
    assert set(ops["core"]) | set(ops["tf_text"]) == set(ops["ops"])
  text_ops = set(report["models"][paths["text"]]["tf_text"])
  assert {"FastWordpieceTokenizeWithOffsets", "NormalizeUTF8"} <= text_ops
  assert report["models"][paths["encoder"]]["tf_text"] == []

  def run_keras(ids, mask, types, positions):
    return model(dict(input_word_ids=tf.constant(ids, tf.int32),
                      input_mask=tf.constant(mask, tf.int32),
                      input_type_ids=tf.constant(types, tf.int32),
                      masked_lm_positions=tf.constant(positions, tf.int32)), training=False)

  def encoder_reference(ids, mask, types):
    sub = keras.Model(model.input, [model.get_layer("layer_1").output,
                                    model.get_layer("pooler").output,
                                    model.get_layer("layer_0").output])
    feed = dict(input_word_ids=np.array(ids, np.int32), input_mask=np.array(mask, np.int32),
                input_type_ids=np.array(types, np.int32),
                masked_lm_positions=np.zeros([len(ids), 1], np.int32))
    return [x.numpy() for x in sub(feed, training=False)]

  # 0: preprocessor at the export length = Python tokenizer + the original packing.
  expected = [python_pack(tokenizer, tokenizer.tokenize_to_ids(t), [], SEQ_LENGTH) for t in TEXTS]
  for i, name in enumerate(("input_word_ids", "input_mask", "input_type_ids")):
    np.testing.assert_array_equal(out[f"0/{name}"], [e[i] for e in expected])
  # 1: pairs, each row at its own length, padded to the largest.
  width = max(lengths)
  for row, (a, b, n) in enumerate(zip(TEXTS, TEXTS_B, lengths)):
    ids, mask, types = python_pack(tokenizer, tokenizer.tokenize_to_ids(a),
                                   tokenizer.tokenize_to_ids(b), n)
    pad = [0] * (width - n)
    np.testing.assert_array_equal(out["1/input_word_ids"][row], ids + pad)
    np.testing.assert_array_equal(out["1/input_mask"][row], mask + pad)
    np.testing.assert_array_equal(out["1/input_type_ids"][row], types + pad)
  # The long pair (41 and 30 tokens, budget 37): A keeps 19 tokens, B 18.
  assert out["1/input_mask"][3].sum() == 40

  # 2, 3: embeddings equal the Keras model on the same packing.
  ids, mask, types = (np.array([e[i] for e in expected]) for i in range(3))
  seq, pooled, _ = encoder_reference(ids, mask, types)
  assert_real_positions_close(out["2/sequence_output"], seq, mask)
  np.testing.assert_allclose(out["2/pooled_output"], pooled, atol=1e-4)
  np.testing.assert_array_equal(out["2/input_mask"], mask)
  tokens = out["2/tokens"][0]
  assert [t.decode() for t in tokens[:9]] == ["[CLS]", "the", "man", "went", "to", "the",
                                              "store", ".", "[SEP]"]
  assert tokens[9] == b""
  seq3, pooled3, _ = encoder_reference(out["1/input_word_ids"], out["1/input_mask"],
                                       out["1/input_type_ids"])
  assert_real_positions_close(out["3/sequence_output"], seq3, out["1/input_mask"])
  np.testing.assert_allclose(out["3/pooled_output"], pooled3, atol=1e-4)

  # 4: fill_mask.
  counts = []
  for row, text in enumerate(MASK_TEXTS):
    ids, mask, types = python_pack(tokenizer, python_tokenize_with_masks(tokenizer, text), [],
                                   SEQ_LENGTH)
    positions = [i for i, x in enumerate(ids) if x == vocab["[MASK]"]]
    counts.append(len(positions))
    assert out["4/mask_count"][row] == len(positions)
    m = out["4/mask_positions"].shape[1]
    np.testing.assert_array_equal(out["4/mask_positions"][row], positions + [-1] * (m - len(positions)))
    if not positions:
      assert (out["4/top_ids"][row] == -1).all()
      assert (out["4/top_tokens"][row] == b"").all()
      assert (out["4/top_probabilities"][row] == 0).all()
      continue
    logits = run_keras([ids], [mask], [types], [positions])["masked_lm_logits"].numpy()[0]
    probs = softmax(logits.astype(np.float64))
    for j in range(len(positions)):
      top = np.argsort(-probs[j], kind="stable")[:TOP_K]
      np.testing.assert_array_equal(out["4/top_ids"][row, j], top)
      np.testing.assert_allclose(out["4/top_probabilities"][row, j], probs[j][top], atol=1e-5)
      assert [t.decode() for t in out["4/top_tokens"][row, j]] == \
          tokenizer.convert_ids_to_tokens(top.tolist())
  # Two masks in row 1, none in rows 2 and 3, and row 4's mask is cut off by truncation.
  assert counts == [1, 3, 0, 0, 0, 1]
  assert out["4/top_ids"].shape == (len(MASK_TEXTS), 3, TOP_K)

  # 5: next_sentence.
  packed = [python_pack(tokenizer, tokenizer.tokenize_to_ids(a), tokenizer.tokenize_to_ids(b),
                        SEQ_LENGTH) for a, b in zip(TEXTS, TEXTS_B)]
  logits = run_keras(*[[p[i] for p in packed] for i in range(3)],
                     np.zeros([len(TEXTS), 1], np.int32))["next_sentence_logits"].numpy()
  np.testing.assert_allclose(out["5/probabilities"], softmax(logits), atol=1e-5)
  np.testing.assert_allclose(out["5/is_next_probability"], softmax(logits)[:, 0], atol=1e-5)

  # 6: the encoder on Python-packed ids, with the TF Hub outputs.
  ids, mask, types = (np.array(encoder_inputs[k]) for k in
                      ("input_word_ids", "input_mask", "input_type_ids"))
  seq, pooled, layer0 = encoder_reference(ids, mask, types)
  assert_real_positions_close(out["6/sequence_output"], seq, mask)
  np.testing.assert_allclose(out["6/pooled_output"], pooled, atol=1e-4)
  assert out["6/encoder_outputs"].shape == (5, 2, 11, 64)
  assert_real_positions_close(out["6/encoder_outputs"][:, 0], layer0, mask)
  assert_real_positions_close(out["6/encoder_outputs"][:, 1], seq, mask)


def assert_real_positions_close(actual, desired, mask):
  """The served per-position outputs equal the Keras model's at real positions; a batch of
  several texts is packed (serving/request_packing.py), so its padding positions are 0."""
  real = np.asarray(mask) > 0
  np.testing.assert_allclose(actual[real], desired[real], atol=1e-4)
  if len(real) > 1:
    assert np.all(actual[~real] == 0)


# === saved_model_cli ===


@pytest.mark.slow
def test_a_bfloat16_export_answers_as_the_float32_one(exported, tmp_path):
  """--serving_precision=bfloat16 through the command line: the same signatures, answers within
  bfloat16's rounding of the float32 export's for one text and a packed batch, and the matmul
  kernels held as graph constants (no bfloat16 kernel variables). The tiny model's weights are
  drawn wide (initializer_range 0.5): its bfloat16 outputs move by up to about 0.15, the same
  with the kernels as variables; a wrong kernel would move them by about 1."""
  paths, _, _, _ = shared.export_with_the_command_line(
      tmp_path, ["--serving_precision=bfloat16", "--nowarmup"])
  half = tf.saved_model.load(paths["text"])
  full = tf.saved_model.load(exported[0]["text"])
  assert sorted(half.signatures) == sorted(full.signatures)
  batch = ["a short text.", "and a longer one, with more words in it", "x"]
  for texts in (batch[:1], batch):
    want = full.signatures["serving_default"](text=tf.constant(texts))
    got = half.signatures["serving_default"](text=tf.constant(texts))
    assert sorted(got) == sorted(want)
    mask = want["input_mask"].numpy()[..., None] > 0
    np.testing.assert_array_equal(got["input_mask"].numpy(), want["input_mask"].numpy())
    np.testing.assert_allclose(got["sequence_output"].numpy() * mask,
                               want["sequence_output"].numpy() * mask, atol=0.25)
    np.testing.assert_allclose(got["pooled_output"].numpy(), want["pooled_output"].numpy(),
                               atol=0.25)
  assert not [v.name for v in half.variables if v.dtype == tf.bfloat16 and len(v.shape) == 2]


@pytest.mark.slow
def test_saved_model_cli_lists_the_signatures(exported):
  paths = exported[0]
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  expected = {
      "text": {
          "serving_default": (["text"], ["pooled_output", "sequence_output", "input_mask",
                                         "tokens"]),
          "encode": (["text", "text_b", "seq_length"], ["pooled_output", "sequence_output"]),
          "fill_mask": (["text"], ["mask_count", "mask_positions", "top_ids", "top_tokens",
                                   "top_probabilities"]),
          "next_sentence": (["text", "text_b"], ["probabilities", "is_next_probability"])},
      "preprocessor": {
          "serving_default": (["text"], ["input_word_ids", "input_mask", "input_type_ids"]),
          "preprocess": (["text", "text_b", "seq_length"], ["input_word_ids"])},
      "encoder": {
          "serving_default": (["input_word_ids", "input_mask", "input_type_ids"],
                              ["pooled_output", "sequence_output", "encoder_outputs"])},
  }
  shapes = {"text": "(-1)", "text_b": "(-1)", "seq_length": "(-1)",
            "input_word_ids": "(-1, -1)", "input_mask": "(-1, -1)", "input_type_ids": "(-1, -1)",
            "pooled_output": "(-1, 64)", "sequence_output": "(-1, -1, 64)",
            "encoder_outputs": "(-1, 2, -1, 64)", "tokens": "(-1, -1)", "mask_count": "(-1)",
            "mask_positions": "(-1, -1)", "top_ids": "(-1, -1, 4)", "top_tokens": "(-1, -1, 4)",
            "top_probabilities": "(-1, -1, 4)", "probabilities": "(-1, 2)",
            "is_next_probability": "(-1)"}
  dtypes = {"text": "DT_STRING", "text_b": "DT_STRING", "tokens": "DT_STRING",
            "top_tokens": "DT_STRING", "seq_length": "DT_INT32", "input_word_ids": "DT_INT32",
            "input_mask": "DT_INT32", "input_type_ids": "DT_INT32", "mask_count": "DT_INT32",
            "mask_positions": "DT_INT32", "top_ids": "DT_INT32"}
  # The text model, the one with most signatures, through the command (`--all` also loads the
  # model to list its functions); the two others as the command reads them, in this process
  # (a TensorFlow start-up each spared): the same MetaGraphDef, printed the same way.
  shown = {}
  result = subprocess.run([cli, "show", "--dir", paths["text"], "--all"], capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  shown["text"] = result.stdout
  for kind in ("preprocessor", "encoder"):
    meta_graph = saved_model_utils.get_meta_graph_def(paths[kind], "serve")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
      for name in sorted(meta_graph.signature_def):
        print(f"\nsignature_def['{name}']:")
        show = saved_model_cli._show_inputs_outputs_mgd  # pylint: disable=protected-access
        show(meta_graph, name, indent=1)
    shown[kind] = printed.getvalue()
  for kind, signatures in expected.items():
    blocks = {}
    for block in shown[kind].split("signature_def['")[1:]:
      blocks[block.split("'", 1)[0]] = block
    assert set(blocks) - {"__saved_model_init_op"} == set(signatures), kind
    for name, (inputs, outputs) in signatures.items():
      block = blocks[name]
      assert "Method name is: tensorflow/serving/predict" in block
      for direction, names in (("inputs", inputs), ("outputs", outputs)):
        for tensor in names:
          start = block.index(f"{direction}['{tensor}'] tensor_info:")
          info = block[start:start + 200]
          assert f"dtype: {dtypes.get(tensor, 'DT_FLOAT')}" in info, (kind, name, tensor)
          shape = "(-1, -1)" if kind == "preprocessor" and name == "preprocess" and \
              direction == "outputs" else shapes[tensor]
          # The raw-text signatures pad a request to its length bucket (--length_buckets),
          # so the length is dynamic like the batch ([batch, None]).
          assert f"shape: {shape}" in info, (kind, name, tensor, info)


# === Warm-up records ===


@pytest.mark.slow
def test_warmup_records_are_prediction_logs_the_model_accepts(exported, loaded_text):
  paths = exported[0]
  # The text model's records are run through it; the other two are checked for their model
  # name and signatures only (loading them again would add half a minute).
  for kind, path in paths.items():
    loaded = loaded_text if kind == "text" else None
    with open(os.path.join(path, "assets", "export_info.json")) as f:
      signature_names = set(json.load(f)["signatures"])
    seen, batch_sizes = set(), []
    for record in tf.data.TFRecordDataset(os.path.join(path, "assets.extra", tf_serving.WARMUP_FILE)):
      (number, predict_log), = protobuf_fields(record.numpy())
      assert number == 6  # PredictionLog.predict_log
      (number, request), = protobuf_fields(predict_log)
      assert number == 1  # PredictLog.request
      fields = protobuf_fields(request)
      assert fields[0][0] == 1  # model_spec
      spec = dict(protobuf_fields(fields[0][1]))
      assert spec[1].decode() == os.path.basename(os.path.dirname(path))
      signature_name = spec[3].decode()
      inputs = {}
      for number, entry in fields[1:]:
        assert number == 2  # inputs map entry
        entry = dict(protobuf_fields(entry))
        proto = tf.make_tensor_proto(0)
        proto.ParseFromString(entry[2])
        inputs[entry[1].decode()] = tf.constant(tf.make_ndarray(proto))
      if kind == "encoder":
        assert set(inputs) == {"input_word_ids", "input_mask", "input_type_ids"}
      rows = {v.shape[0] for v in inputs.values()}
      assert len(rows) == 1
      batch_sizes.append(rows.pop())
      if loaded is not None:
        outputs = loaded.signatures[signature_name](**inputs)
        assert all(v.shape[0] == batch_sizes[-1] for v in outputs.values())
      seen.add(signature_name)
    assert seen == signature_names, kind
    # Each signature is warmed with one text alone (the unpacked graph), then two (packed).
    assert batch_sizes == [1, 2] * len(signature_names), kind
    if loaded is not None:
      assert seen == set(loaded.signatures)


# === README requests, parsed as TF Serving's REST API does ===


def _rest_value(value):
  if isinstance(value, dict) and set(value) == {"b64"}:
    return base64.b64decode(value["b64"])
  return value.encode("utf-8") if isinstance(value, str) else value


def rest_inputs(body, signature):
  """The input tensors of a TF Serving REST predict body (row "instances" or columnar "inputs")."""
  names = list(signature.structured_input_signature[1])
  if "instances" in body:
    rows = body["instances"]
    if not all(isinstance(r, dict) and "b64" not in r for r in rows):
      assert len(names) == 1, "bare instances need a single-input signature"
      rows = [{names[0]: r} for r in rows]
    columns = {name: [_rest_value(r[name]) for r in rows] for name in rows[0]}
  else:
    columns = body["inputs"]
    if not isinstance(columns, dict):
      columns = {names[0]: columns}
    columns = {name: [_rest_value(v) for v in values] for name, values in columns.items()}
  assert set(columns) == set(names), (sorted(columns), names)
  specs = signature.structured_input_signature[1]
  return {name: tf.constant(np.array(values, dtype=object if specs[name].dtype == tf.string
                                     else None), dtype=specs[name].dtype)
          for name, values in columns.items()}


@pytest.mark.slow
def test_readme_request_bodies_run_through_the_signatures(exported, loaded_text):
  tokenizer = exported[2]
  with open(REQUESTS) as f:
    bodies = json.load(f)
  results = {}
  for name, body in bodies.items():
    signature = loaded_text.signatures[body.get("signature_name", "serving_default")]
    results[name] = signature(**rest_inputs(body, signature))
  # Row and columnar formats of the same texts give the same answer.
  np.testing.assert_array_equal(results["embed_rows"]["pooled_output"],
                                results["embed_columns"]["pooled_output"])
  assert results["embed_rows"]["pooled_output"].shape == (2, 64)
  pairs = bodies["encode_pairs_columns"]["inputs"]
  expected = [python_pack(tokenizer, tokenizer.tokenize_to_ids(a), tokenizer.tokenize_to_ids(b),
                          n)[0] for a, b, n in zip(pairs["text"], pairs["text_b"],
                                                   pairs["seq_length"])]
  expected[1] += [0] * (32 - 16)
  np.testing.assert_array_equal(results["encode_pairs_columns"]["tokens"],
                                [[tokenizer.convert_ids_to_tokens([i])[0].encode() if i else b""
                                  for i in row] for row in expected])
  np.testing.assert_array_equal(results["fill_mask_rows"]["mask_count"], [1, 2, 0])
  assert results["fill_mask_rows"]["top_tokens"].shape == (3, 2, TOP_K)
  assert results["next_sentence_rows"]["probabilities"].shape == (2, 2)
  # b64: "Caf\xe9 [MASK] lait." is not UTF-8; the stray byte is dropped ("caf" survives).
  assert results["fill_mask_b64_rows"]["mask_count"].numpy().tolist() == [1]


# === Bad input against the exported model ===


@pytest.mark.slow
def test_empty_batches_and_zero_lengths_give_empty_results(exported, loaded_text):
  paths = exported[0]
  # Preprocessor: 2 signatures; encoder: rows and length 0; text model: 4 signatures.
  assert helpers.assert_empty_requests_give_empty_results(
      tf.saved_model.load(paths["preprocessor"])) == 2
  assert helpers.assert_empty_requests_give_empty_results(
      tf.saved_model.load(paths["encoder"])) == 2
  assert helpers.assert_empty_requests_give_empty_results(loaded_text) == 4
  # `encode` of an empty batch: [0, 0] outputs, like `preprocess`.
  out = loaded_text.signatures["encode"](text=tf.constant([], tf.string),
                                         text_b=tf.constant([], tf.string),
                                         seq_length=tf.constant([], tf.int32))
  assert out["sequence_output"].shape == (0, 0, CONFIG.hidden_size)


@pytest.mark.slow
def test_bad_inputs(exported, loaded_text):
  tokenizer = exported[2]
  sig = loaded_text.signatures
  # Empty strings: [CLS] [SEP].
  out = sig["serving_default"](text=tf.constant(["", ""]))
  assert out["input_mask"].numpy().sum(axis=1).tolist() == [2, 2]
  # Mixed lengths with a very long text: truncated to the export length, not an error.
  long_text = "paris " * 5000
  out = sig["serving_default"](text=tf.constant(["a", long_text, "a b c"]))
  assert out["input_mask"].numpy().sum(axis=1).tolist() == [3, SEQ_LENGTH, 5]
  out = sig["encode"](text=tf.constant([long_text, "x"]), text_b=tf.constant([long_text, ""]),
                      seq_length=tf.constant([64, 5]))
  assert out["sequence_output"].shape == (2, 64, 64)
  assert out["input_mask"].numpy().sum(axis=1).tolist() == [64, 3]
  # Non-UTF-8 bytes are dropped before tokenizing (the original's decode(..., "ignore")).
  out = sig["serving_default"](text=tf.constant([b"caf\xe9 \xff\xfeau lait", b"caf au lait"]))
  np.testing.assert_array_equal(out["tokens"][0], out["tokens"][1])
  np.testing.assert_allclose(out["pooled_output"][0], out["pooled_output"][1], atol=1e-6)
  expected = ["[CLS]"] + tokenizer.tokenize("caf au lait") + ["[SEP]"]
  assert [t.decode() for t in out["tokens"].numpy()[1][:len(expected) + 1]] == expected + [""]
  # fill_mask with no [MASK] anywhere: empty per-example results, not a crash.
  out = sig["fill_mask"](text=tf.constant(["no mask", ""]))
  assert out["mask_count"].numpy().tolist() == [0, 0]
  assert out["top_tokens"].shape == (2, 0, TOP_K)
  assert out["mask_positions"].shape == (2, 0)
  # Lower-case "[mask]" is text, not a mask.
  assert sig["fill_mask"](text=tf.constant(["a [mask]"]))["mask_count"].numpy().tolist() == [0]
  # A seq_length beyond the position table or too short for [CLS] [SEP] is a clear error.
  with pytest.raises(tf.errors.InvalidArgumentError, match="seq_length must be at most 64"):
    sig["encode"](text=tf.constant(["a"]), text_b=tf.constant([""]), seq_length=tf.constant([65]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="seq_length must be at least 2"):
    sig["encode"](text=tf.constant(["a"]), text_b=tf.constant(["b"]), seq_length=tf.constant([2]))
  # A text_b or seq_length that does not line up with the texts is refused, never a made-up row;
  # one seq_length serves every text.
  two = tf.constant(["paris is", "a b"])
  with pytest.raises(tf.errors.InvalidArgumentError, match="text_b must have one entry per text"):
    sig["encode"](text=two, text_b=tf.constant(["c"]), seq_length=tf.constant([8, 8]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="seq_length must have one entry"):
    sig["encode"](text=two, text_b=tf.constant(["", ""]), seq_length=tf.constant([8, 8, 8]))
  out = sig["encode"](text=two, text_b=tf.constant(["", ""]), seq_length=tf.constant([3]))
  assert out["input_mask"].numpy().sum(axis=1).tolist() == [3, 3]
  preprocess = tf.saved_model.load(exported[0]["preprocessor"]).signatures["preprocess"]
  with pytest.raises(tf.errors.InvalidArgumentError, match="text_b must have one entry per text"):
    preprocess(text=two, text_b=tf.constant(["c"]), seq_length=tf.constant([8, 8]))
  # A text of another rank is refused by name, not by an op deep in the tokenizer.
  for signature, inputs in [("serving_default", {}), ("fill_mask", {}),
                            ("encode", dict(text_b=two, seq_length=tf.constant([8])))]:
    for text in [tf.constant("paris is"), tf.constant([["paris", "is"]])]:
      with pytest.raises(tf.errors.InvalidArgumentError,
                         match=r"Shape of tensor text \[[0-9,]*\] is not compatible"):
        sig[signature](text=text, **inputs)
  # The encoder export names what is wrong with the ids it is sent.
  encoder = tf.saved_model.load(exported[0]["encoder"]).signatures["serving_default"]
  ids = tf.fill([1, 4], 7)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"Shape of tensor input_\w+ \[4\] is not compatible"):
    encoder(input_word_ids=ids[0], input_mask=ids[0], input_type_ids=0 * ids[0])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="input_mask must have the shape of input_word_ids"):
    encoder(input_word_ids=ids, input_mask=tf.ones([1, 5], tf.int32), input_type_ids=0 * ids)
  with pytest.raises(tf.errors.InvalidArgumentError, match="at most 64 positions a row"):
    wide = tf.fill([1, 65], 7)
    encoder(input_word_ids=wide, input_mask=tf.ones_like(wide), input_type_ids=0 * wide)


def test_export_argument_errors(tmp_path):
  weights = {}
  with pytest.raises(ValueError, match="seq_length must be in"):
    saved_model.export_serving_models(CONFIG, weights, VOCAB, str(tmp_path), seq_length=65)
  with pytest.raises(FileNotFoundError, match="vocab file not found"):
    saved_model.export_serving_models(CONFIG, weights, str(tmp_path / "none.txt"), str(tmp_path),
                                  seq_length=16)


@pytest.mark.slow
def test_export_refuses_a_tokenizer_the_data_was_not_made_with(exported, tmp_path, capsys):
  """The export's tokenizer must be the training data's: --vocab_file's md5 and --do_lower_case
  against --data_metadata_file, refused before anything is written (probe item 2)."""
  from bert_tf import export  # pylint: disable=g-import-not-at-top
  from bert_tf import record_schema  # pylint: disable=g-import-not-at-top
  root = exported[3]
  metadata = tmp_path / "data.metadata.json"
  metadata.write_text(json.dumps(dict(METADATA, do_lower_case=True,
                                      vocab_md5=record_schema.vocab_checksum(VOCAB))))
  shuffled = tmp_path / "vocab.txt"
  with open(VOCAB) as f:
    lines = f.read().splitlines()
  shuffled.write_text("\n".join(lines[:1000] + lines[1000:][::-1]) + "\n")
  base = ["export", f"--checkpoint={root / 'ckpt' / 'bert_model.ckpt'}",
          f"--export_dir={tmp_path / 'out'}", f"--data_metadata_file={metadata}"]
  cases = [([f"--vocab_file={shuffled}"], r"--vocab_file=.*vocab.txt \(md5 .*\) is not the "
                                           r"vocab the data was made with"),
           ([f"--vocab_file={VOCAB}", "--nodo_lower_case"],
            "--do_lower_case=False but the data was made with do_lower_case=True")]
  for flags, message in cases:
    assert helpers.run_cli_in_process(export, base + flags) == 1
    err = capsys.readouterr().err
    assert re.search(message, err) and "--allow_tokenizer_mismatch" in err, err
    assert not os.path.exists(tmp_path / "out" / "bert")


def test_a_pretraining_export_without_vocab_file_uses_the_runs_recorded_vocab(tmp_path,
                                                                             monkeypatch,
                                                                             caplog):
  """run_pretraining records the data's vocab as output_dir/vocab.txt; its export takes that
  vocab for the raw-text models when --vocab_file is not given, and says when it has none."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  calls = []
  monkeypatch.setattr(saved_model, "export_trained_model",
                      lambda *args, **kwargs: calls.append(kwargs) or "done")
  settings = pretraining.PretrainingSettings(input_file="x.tfrecord",
                                             output_dir=str(tmp_path), do_train=True)
  with caplog.at_level("WARNING"):
    saved_model.export_pretraining(None, CONFIG, settings, version=3)
  assert calls[-1]["vocab_file"] is None and calls[-1]["serving"] is True
  assert "the export holds the ids-in models only" in caplog.text
  recorded = tmp_path / "vocab.txt"
  recorded.write_text("[PAD]\n")
  caplog.clear()
  saved_model.export_pretraining(None, CONFIG, settings, version=3)
  assert calls[-1]["vocab_file"] == str(recorded) and caplog.text == ""
  given = dataclasses.replace(settings, vocab_file=VOCAB)
  saved_model.export_pretraining(None, CONFIG, given, version=3)
  assert calls[-1]["vocab_file"] == VOCAB
