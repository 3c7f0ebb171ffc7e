"""The raw-text question-answering export (tasks.squad.serving_module and export) against
squad_data and squad_answers: for the same model and inputs, every answer equals predictions.json's, the null
score differences null_odds.json's, and start / end locate the answer in the context.

The references run the Python pipeline (read_squad_examples, convert_examples_to_features, the
Keras model on the features, postprocess). A tiny random span model answers the fixture files
(its spans are diverse: short and long, across punctuation, in any window); a "token score"
model, whose logits are a fixed score per token id, forces the hand-made cases (an answer
inside "(1895-1943).", accents, [UNK], whitespace runs, ties, many windows).
"""

import functools
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.tasks.squad import serving_module as squad_module
from bert_tf.tasks.squad import answers as sa
from bert_tf.tasks.squad import data as sd
from bert_tf.tasks.squad import export as squad_export
from bert_tf.tasks.squad import run as squad_run
from bert_tf.text import InGraphTokenizer
from bert_tf.tokenization import FullTokenizer
from bert_tf.tasks.squad import head as squad_head
from tests import helpers
from tests.helpers import REPO_ROOT, TEST_DATA, protobuf_fields, subprocess_env

VOCAB = os.path.join(TEST_DATA, "vocab_uncased.txt")
SQUAD = os.path.join(TEST_DATA, "squad")
# Small windows, so that many contexts need several (the long ones up to ~10).
SEQ, STRIDE, QUERY, NBEST, MAX_ANSWER = 64, 24, 16, 20, 30
# initializer_range 0.5 spreads the logits: no near-ties decided by float rounding.
CONFIG = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=37, max_position_embeddings=SEQ, initializer_range=0.5,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
SEPARATORS = re.compile("[ \t\r\n\u202f]+")


# === References ===


def read_files(names):
  """(examples, contexts): the questions of the files and each one's raw context."""
  examples, contexts = [], []
  for name in names:
    path = os.path.join(SQUAD, name)
    examples += sd.read_squad_examples(path, is_training=False)
    for article in json.load(open(path, encoding="utf-8"))["data"]:
      for paragraph in article["paragraphs"]:
        contexts += [paragraph["context"]] * len(paragraph["qas"])
  assert len(examples) == len(contexts)
  return examples, contexts


def make_examples(pairs):
  """SquadExamples of (question, context) pairs, split as read_squad_examples splits."""
  return [sd.SquadExample(qas_id=f"q{i}", question_text=q, doc_tokens=sd.split_context(c)[0])
          for i, (q, c) in enumerate(pairs)]


def reference(model, examples, v2, threshold=0.0, n_best_size=NBEST):
  """(predictions, null odds, nbest) of postprocess for the model's float32 logits."""
  tokenizer = FullTokenizer(VOCAB, do_lower_case=True)
  features = []
  sd.convert_examples_to_features(examples, tokenizer, SEQ, STRIDE, QUERY, False,
                                  features.append)
  results = []
  if features:
    inputs = dict(input_word_ids=np.array([f.input_ids for f in features], np.int32),
                  input_mask=np.array([f.input_mask for f in features], np.int32),
                  input_type_ids=np.array([f.segment_ids for f in features], np.int32))
    out = model(inputs, training=False)
    start, end = np.asarray(out["start_logits"]), np.asarray(out["end_logits"])
    results = [sa.RawResult(f.unique_id, start[i].tolist(), end[i].tolist())
               for i, f in enumerate(features)]
  predictions, nbest, odds = sa.postprocess(examples, features, results, n_best_size,
                                            MAX_ANSWER, True, v2, threshold)
  return predictions, odds, nbest


def collapse(text):
  """The text's words (the reader's separators) joined by single spaces."""
  return " ".join(w for w in SEPARATORS.split(text) if w)


def check(out, examples, contexts, ref, v2):
  """Every row of the export's outputs against postprocess; returns the answers."""
  predictions, odds, nbest = ref
  out = {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v) for k, v in out.items()}
  expected_keys = {"answer", "score", "start", "end"} | (
      {"null_score_diff", "has_answer"} if v2 else set())
  assert set(out) == expected_keys
  answers = [a.decode("utf-8") for a in out["answer"]]
  for i, (example, context) in enumerate(zip(examples, contexts)):
    qid = example.qas_id
    where = f"question {qid!r}"
    assert answers[i] == predictions[qid], where
    # SQuAD 1.1 without any valid span: the n-best is the original's placeholder alone.
    placeholder = not v2 and [(e["text"], e["start_logit"], e["end_logit"])
                              for e in nbest[qid]] == [("empty", 0.0, 0.0)]
    non_null = [e for e in nbest[qid] if e["text"]] if not placeholder else []
    if non_null:
      np.testing.assert_allclose(out["score"][i],
                                 non_null[0]["start_logit"] + non_null[0]["end_logit"],
                                 rtol=1e-5, err_msg=where)
    if v2:
      np.testing.assert_allclose(out["null_score_diff"][i], odds[qid], rtol=1e-5, err_msg=where)
      assert out["has_answer"][i] == (answers[i] != ""), where
    start, end = int(out["start"][i]), int(out["end"][i])
    if answers[i] == "" or placeholder:
      assert (start, end) == (-1, -1), where
    else:
      # The answer's characters, with each run of separators as one space (as orig_text).
      assert 0 <= start < end <= len(context), where
      assert collapse(context[start:end]) == answers[i], where
      assert not SEPARATORS.match(context[start]), where
      assert not SEPARATORS.match(context[end - 1]), where
  return answers


# === A model with a fixed score per token ===


def token_score_model(boosts, cls_score=-3.0, seed=0):
  """A span model whose start / end logit at a position is a score of its token id: small noise
  for every id, boosts {id: (start, end)} for chosen ones, cls_score for [CLS] (the null
  answer), -10 for padding."""
  rng = np.random.default_rng(seed)
  table = (0.1 * rng.standard_normal((CONFIG.vocab_size, 2))).astype(np.float32)
  table[0] = -10.0
  table[101] = cls_score
  for token_id, (start, end) in boosts.items():
    table[token_id] = (start, end)
  inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in ENCODER_INPUTS}
  embed = keras.layers.Embedding(CONFIG.vocab_size, 2, name="token_scores")
  scores = embed(inputs["input_word_ids"])
  unused = keras.ops.cast(inputs["input_mask"] * 0 + inputs["input_type_ids"] * 0, "float32")
  model = keras.Model(inputs, {"start_logits": scores[:, :, 0] + unused,
                               "end_logits": scores[:, :, 1] + unused})
  embed.set_weights([table])
  return model


@functools.lru_cache(maxsize=None)
def vocab_ids():
  return FullTokenizer(VOCAB, do_lower_case=True).vocab


def ids(*tokens):
  return [vocab_ids()[t] for t in tokens]


FILLER = ("the river ran past old houses and quiet fields while birds sang in the tall trees "
          "near a small bridge ").split()
HAND_MADE = [
    ("When was Bohr born?", "Niels Bohr (1895-1943). was a physicist."),
    ("Who owns it?", "The cafe\u0301's owner smiled."),  # decomposed accent: falls back
    ("Where did they meet?", "We met at the Café de Flore in Paris."),
    ("What did she see?", "She saw a \u2603 today."),  # [UNK]: falls back to the word
    ("Which letters?", "alpha\n\n  beta \u202f gamma,\tdelta"),
    ("Where is the zebra?", " ".join(FILLER * 10) + " the zebra sleeps there. " +
     " ".join(FILLER[:7])),  # ~160 pieces: 5 windows
    ("Which fruit?", " ".join(["kiwi"] * 80)),  # equal scores everywhere: ties
    ("Nothing?", ""),
    ("", "  \n\t "),  # empty question, only separators
    ("Control?", "\x00\x01 \x02"),  # words without any WordPiece: no window
    ("", "Niels Bohr (1895-1943)."),  # empty question
    # U+00A0 is inside a reader word but a space to the BasicTokenizer: counts differ, fallback
    ("How far?", "It is 10\u00a0km away."),
]
BOOSTS = {
    ids("1895")[0]: (6.0, 6.0), ids("cafe")[0]: (5.0, 5.0), ids("[UNK]")[0]: (5.0, 5.0),
    ids("alpha")[0]: (6.0, -1.0), ids("gamma")[0]: (-1.0, 6.0), ids("zebra")[0]: (4.0, 4.0),
    ids("ki")[0]: (3.0, -1.0), ids("##wi")[0]: (-1.0, 3.0), ids("km")[0]: (5.0, 5.0),
}
HAND_MADE_ANSWERS = ["1895", "cafe\u0301's", "Café", "\u2603", "alpha beta gamma", "zebra",
                     "kiwi", None, None, None, "1895", "10\u00a0km"]


@pytest.fixture(scope="module")
def score_model():
  return token_score_model(BOOSTS)


@pytest.fixture(scope="module")
def tokenizer():
  return InGraphTokenizer(VOCAB, do_lower_case=True, drop_invalid_utf8=True)


def module_for(tokenizer, model, v2, threshold=0.0, n_best_size=NBEST):
  return squad_module.QuestionAnsweringModule(
      tokenizer, model, seq_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY,
      n_best_size=n_best_size, max_answer_length=MAX_ANSWER, do_lower_case=True,
      version_2_with_negative=v2, null_score_diff_threshold=threshold)


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
def test_hand_made_inputs(score_model, tokenizer, v2):
  examples = make_examples(HAND_MADE)
  ref = reference(score_model, examples, v2)
  module = module_for(tokenizer, score_model, v2)
  out = module.answer(tf.constant([q for q, _ in HAND_MADE]),
                      tf.constant([c for _, c in HAND_MADE]))
  answers = check(out, examples, [c for _, c in HAND_MADE], ref, v2)
  expected = [a if a is not None else ("" if v2 else "empty") for a in HAND_MADE_ANSWERS]
  assert answers == expected
  starts, ends = out["start"].numpy().tolist(), out["end"].numpy().tolist()
  context = HAND_MADE[0][1]
  assert (starts[0], ends[0]) == (context.index("1895"), context.index("1895") + 4)
  assert (starts[4], ends[4]) == (0, HAND_MADE[4][1].index(","))  # across "\n\n  ", " \u202f "
  assert (starts[6], ends[6]) == (0, 4)  # ties: the first window, the first position
  long_context = HAND_MADE[5][1]
  assert starts[5] == long_context.index("zebra")
  python_tokenizer = FullTokenizer(VOCAB)
  num_query = len(python_tokenizer.tokenize(HAND_MADE[5][0]))
  assert len(sd.doc_spans(len(python_tokenizer.tokenize(long_context)), SEQ - num_query - 3,
                          STRIDE)) >= 5
  if v2:
    np.testing.assert_array_equal(out["null_score_diff"].numpy()[7:10],
                                  [sa.NO_ANSWER_SCORE_DIFF] * 3)


def test_a_one_entry_nbest_holding_the_null_answer(tokenizer):
  """n_best_size=1 with a null score above every span: postprocess's n-best is the null answer
  alone, so the answer is "" with NO_ANSWER_SCORE_DIFF whatever the threshold."""
  model = token_score_model(BOOSTS, cls_score=8.0)
  pairs = HAND_MADE[:3]
  examples = make_examples(pairs)
  ref = reference(model, examples, True, threshold=1e9, n_best_size=1)
  assert set(ref[0].values()) == {""} and set(ref[1].values()) == {sa.NO_ANSWER_SCORE_DIFF}
  module = module_for(tokenizer, model, True, threshold=1e9, n_best_size=1)
  out = module.answer(tf.constant([q for q, _ in pairs]), tf.constant([c for _, c in pairs]))
  check(out, examples, [c for _, c in pairs], ref, True)


def test_empty_batch_and_invalid_utf8(score_model, tokenizer):
  module = module_for(tokenizer, score_model, True)
  out = module.answer(tf.constant([], tf.string), tf.constant([], tf.string))
  assert {k: v.shape for k, v in out.items()} == {
      k: (0,) for k in ("answer", "score", "start", "end", "null_score_diff", "has_answer")}
  # Invalid bytes are dropped: the answer is that of the valid text.
  bad = "Niels Bohr (1895-1943). was".encode("utf-8").replace(b"Bohr", b"Bo\xffhr")
  out = module.answer(tf.constant([b"When?", b"When?"]),
                      tf.constant([bad, "Niels Bohr (1895-1943). was".encode("utf-8")]))
  assert out["answer"].numpy().tolist() == [b"1895", b"1895"]


def test_argument_errors(score_model, tokenizer):
  with pytest.raises(ValueError, match="max_query_length"):
    squad_module.QuestionAnsweringModule(tokenizer, score_model, 19, STRIDE, 16, NBEST,
                                         MAX_ANSWER, True, True, 0.0)
  with pytest.raises(ValueError, match="doc_stride"):
    squad_module.QuestionAnsweringModule(tokenizer, score_model, SEQ, 0, QUERY, NBEST,
                                         MAX_ANSWER, True, True, 0.0)
  with pytest.raises(ValueError, match="do_lower_case"):
    squad_module.QuestionAnsweringModule(tokenizer, score_model, SEQ, STRIDE, QUERY, NBEST,
                                         MAX_ANSWER, False, True, 0.0)


# === The exports of a random span model ===


@pytest.fixture(scope="module")
def span_model():
  keras.utils.set_random_seed(5)
  return squad_head.build_span_model(CONFIG)


@pytest.fixture(scope="module")
def v2_export(span_model, tmp_path_factory):
  """run_squad's export (squad_export.export_squad, threshold "auto") of SQuAD 2.0, with the
  threshold between two of the null score differences so both kinds of answers occur."""
  examples, contexts = read_files(["dev-v2.0.json", "edge-v2.0.json"])
  odds = sorted(v for v in reference(span_model, examples, True)[1].values()
                if v != sa.NO_ANSWER_SCORE_DIFF)
  middle = len(odds) // 2
  threshold = (odds[middle] + odds[middle + 1]) / 2
  ref = reference(span_model, examples, True, threshold)
  output_dir = str(tmp_path_factory.mktemp("squad_v2"))
  settings = squad_run.SquadSettings(
      output_dir=output_dir, vocab_file=VOCAB, max_seq_length=SEQ, doc_stride=STRIDE,
      max_query_length=QUERY, n_best_size=NBEST, max_answer_length=MAX_ANSWER,
      version_2_with_negative=True, null_score_diff_threshold=None)
  info = dict(task_name="squad", version_2_with_negative=True,
              null_score_diff_threshold=threshold)
  path = squad_export.export_squad(span_model, CONFIG, settings, info, version=7)
  assert path == os.path.join(output_dir, "export", "squad", "7")
  return path, threshold, examples, contexts, ref


@pytest.fixture(scope="module")
def v1_export(span_model, tmp_path_factory):
  examples, contexts = read_files(["dev-v1.1.json"])
  ref = reference(span_model, examples, False)
  export_dir = str(tmp_path_factory.mktemp("squad_v1"))
  path = squad_module.export_squad_model(
      span_model, CONFIG, VOCAB, export_dir, squad_module.AnswerSettings(
          do_lower_case=True, seq_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY,
          n_best_size=NBEST, max_answer_length=MAX_ANSWER, version_2_with_negative=False,
          null_score_diff_threshold=0.0), warmup=False)
  assert path == os.path.join(export_dir, "squad", "1")
  return path, examples, contexts, ref


@pytest.fixture(scope="module")
def loaded_v2(v2_export):
  return tf.saved_model.load(v2_export[0])


@pytest.mark.slow
def test_v2_export_answers_every_question_like_predictions_json(v2_export, loaded_v2):
  _, _, examples, contexts, ref = v2_export
  answers = list(ref[0].values())
  # The threshold gives both kinds of answers.
  assert 40 < answers.count("") < len(answers) - 40
  for name in ("serving_default", "answer"):
    out = loaded_v2.signatures[name](question=tf.constant([e.question_text for e in examples]),
                                     context=tf.constant(contexts))
    check(out, examples, contexts, ref, True)
  # A 0-row batch gets 0-row answers in every signature.
  assert helpers.assert_empty_requests_give_empty_results(loaded_v2) == 2


@pytest.mark.slow
def test_v2_export_layout_assets_and_warmup(v2_export, loaded_v2):
  path, threshold, _, _, _ = v2_export
  assets = sorted(os.listdir(os.path.join(path, "assets")))
  assert assets == ["bert_config.json", "export_info.json", "task_info.json", "vocab.txt"]
  info = json.load(open(os.path.join(path, "assets", "export_info.json")))
  assert info == dict(kind="squad", seq_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY,
                      n_best_size=NBEST, max_answer_length=MAX_ANSWER, do_lower_case=True,
                      version_2_with_negative=True, null_score_diff_threshold=threshold,
                      model_name="squad", signatures=["answer", "serving_default"],
                      length_buckets=[8, 16, 24, 32, 40, 48, 56, 64],  # auto at SEQ 64
                      precision="float32", pack_requests=True)
  task_info = json.load(open(os.path.join(path, "assets", "task_info.json")))
  assert task_info["null_score_diff_threshold"] == threshold
  # The warm-up records: a PredictionLog per signature, which the model answers.
  warmup = os.path.join(path, "assets.extra", "tf_serving_warmup_requests")
  seen = []
  for record in tf.data.TFRecordDataset(warmup):
    (_, predict_log), = protobuf_fields(record.numpy())
    (_, request), = protobuf_fields(predict_log)
    fields = protobuf_fields(request)
    spec = dict(protobuf_fields(fields[0][1]))
    assert spec[1] == b"squad"
    inputs = {}
    for _, entry in fields[1:]:
      entry = dict(protobuf_fields(entry))
      proto = tf.make_tensor_proto(0)
      proto.ParseFromString(entry[2])
      inputs[entry[1].decode()] = tf.constant(tf.make_ndarray(proto))
    assert sorted(inputs) == ["context", "question"]
    out = loaded_v2.signatures[spec[3].decode()](**inputs)
    assert out["answer"].shape == inputs["question"].shape
    seen.append((spec[3].decode(), out["answer"].shape[0]))
  # Each signature warmed with one request alone (unpacked), then two (packed rows).
  assert sorted(seen) == [("answer", 1), ("answer", 2), ("serving_default", 1),
                          ("serving_default", 2)]


_FRESH = os.path.join(REPO_ROOT, "tests", "serving", "serving_subprocess_check.py")


@pytest.mark.slow
def test_v1_export_in_a_fresh_process_answers_like_predictions_json(v1_export, tmp_path):
  """Loaded as a server does (only tensorflow and tensorflow_text imported): the graph holds
  core TensorFlow and tensorflow-text ops only (no Python function), and answers as
  predictions.json; the original's placeholder "empty" for a context without any window."""
  path, examples, contexts, ref = v1_export
  # Plus a question without any window.
  extra = make_examples([("Anything?", "")])[0]
  extra.qas_id = "no-window"
  examples = examples + [extra]
  questions = [e.question_text for e in examples]
  contexts = contexts + [""]
  ref = ({**ref[0], "no-window": "empty"}, ref[1],
         {**ref[2], "no-window": [dict(text="empty", start_logit=0.0, end_logit=0.0)]})
  spec = dict(ops=[path], requests=[dict(model=path, signature="serving_default",
                                         inputs=dict(question=questions, context=contexts))])
  requests = tmp_path / "requests.json"
  requests.write_text(json.dumps(spec))
  env = subprocess_env()
  env.pop("PYTHONPATH", None)
  done = subprocess.run([sys.executable, _FRESH, str(requests), str(tmp_path)], env=env,
                        capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  # Every served output's shape is known to the graph (Grappler's cost model warns otherwise).
  assert "PredictCost" not in done.stderr, done.stderr[-3000:]
  report = json.load(open(tmp_path / "report.json"))
  assert report["bert_tf_modules"] == []
  ops = report["models"][path]
  assert ops["unknown"] == []
  assert not {"PyFunc", "PyFuncStateless", "EagerPyFunc"} & set(ops["ops"])
  outputs = np.load(tmp_path / "outputs.npz", allow_pickle=True)
  out = {key.split("/", 1)[1]: outputs[key] for key in outputs.files}
  answers = check(out, examples, contexts, ref, False)
  assert answers[-1] == "empty"
  assert len(set(answers)) > 100


def test_the_threshold_of_run_squads_export(tmp_path):
  """The flag's value; for "auto" the one the run picked (task info, else eval_results.json)."""
  def settings(threshold):
    return squad_run.SquadSettings(output_dir=str(tmp_path), vocab_file=VOCAB,
                                   version_2_with_negative=True,
                                   null_score_diff_threshold=threshold)

  assert squad_export.null_score_diff_threshold(settings(-1.5), {}) == -1.5
  assert squad_export.null_score_diff_threshold(settings(None), {}) == 0.0
  (tmp_path / "eval_results.json").write_text(json.dumps({"null_score_diff_threshold": 2.25}))
  assert squad_export.null_score_diff_threshold(settings(None), {}) == 2.25
  info = {"null_score_diff_threshold": -0.5}
  assert squad_export.null_score_diff_threshold(settings(None), info) == -0.5
  assert squad_export.null_score_diff_threshold(settings(1.0), info) == 1.0


@pytest.mark.slow
def test_the_readmes_rest_request_runs_on_the_export(loaded_v2):
  """The README's curl body for the SQuAD model, split into columns as TF Serving's REST row
  format does."""
  readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
  bodies = [json.loads(m) for m in re.findall(r"models/squad:predict -d '(\{.*?\})'\n", readme)]
  assert len(bodies) == 1
  body = bodies[0]
  signature = loaded_v2.signatures[body.get("signature_name", "serving_default")]
  columns = {key: tf.constant([row[key] for row in body["instances"]])
             for key in body["instances"][0]}
  out = signature(**columns)
  assert out["answer"].shape == (len(body["instances"]),)
  for key in ("score", "start", "end", "has_answer", "null_score_diff"):
    assert out[key].shape == (len(body["instances"]),), key
