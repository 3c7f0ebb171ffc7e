"""bert_tf.tasks.squad.data: the original run_squad.py's examples, windows and records, and the
answers squad_answers makes of them (its unit tests: squad/test_answers.py).

Two kinds of checks: golden cases worked out by hand from the original's rules
(../shared/spec/ORIGINAL_FINETUNING.md §2), and equality with squad_reference.py, a literal
restatement of the original's loops, on the committed SQuAD fixtures (tests/data/squad, real
text) and on generated contexts, for examples, every feature field, the record bytes and the
three prediction files' JSON text.
"""

import collections
import json
import os
import random

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.tasks.squad import answers as sa
from bert_tf.tasks.squad import data as sd
from tests import helpers
from tests.tasks.squad import squad_reference as ref

DATA = os.path.join(helpers.REPO_ROOT, "tests", "data")
SQUAD = os.path.join(DATA, "squad")
VOCAB = os.path.join(DATA, "vocab_uncased.txt")
FEATURE_FIELDS = ("unique_id", "example_index", "doc_span_index", "tokens", "token_to_orig_map",
                  "token_is_max_context", "input_ids", "input_mask", "segment_ids",
                  "start_position", "end_position", "is_impossible")


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer(VOCAB, do_lower_case=True)


def write_squad(path, paragraphs, version="1.1"):
  """paragraphs: [(context, [qa dict])] -> a SQuAD file with one article."""
  data = {"version": version, "data": [{"title": "t", "paragraphs": [
      {"context": c, "qas": qas} for c, qas in paragraphs]}]}
  with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f, ensure_ascii=False)
  return str(path)


def qa(qid, question, text=None, start=None, impossible=None):
  entry = {"id": qid, "question": question,
           "answers": [] if text is None else [{"text": text, "answer_start": start}]}
  if impossible is not None:
    entry["is_impossible"] = impossible
  return entry


def features_of(examples, tokenizer, is_training, max_seq_length=64, doc_stride=16,
                max_query_length=12):
  out = []
  sd.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                  max_query_length, is_training, out.append)
  return out


# === Golden cases ===


def test_context_split_and_character_offsets():
  tokens, offsets = sd.split_context("  The  cat\tsat\u202fon\n")
  assert tokens == ["The", "cat", "sat", "on"]
  # Leading separators -> -1; a separator keeps the previous word's index.
  assert offsets == [-1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3]
  # Other Unicode spaces (here NO-BREAK SPACE) join the word, as in the original.
  assert sd.split_context("a\u00a0b c")[0] == ["a\u00a0b", "c"]


def test_windows_step_by_doc_stride():
  # doc_stride is the step between window starts (HF's `stride` is the overlap instead).
  assert sd.doc_spans(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
  assert sd.doc_spans(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]  # the step is at most the length
  assert sd.doc_spans(4, 4, 2) == [(0, 4)]
  assert sd.doc_spans(0, 4, 2) == []


def test_max_context_prefers_the_more_central_window_and_the_earlier_on_ties():
  spans = [sd.DocSpan(0, 4), sd.DocSpan(2, 4)]
  # Position 2: window 0 scores min(2, 1) + 0.04 = 1.04, window 1 min(0, 3) + 0.04 = 0.04.
  # Position 3: window 0 min(3, 0) + .04 = .04, window 1 min(1, 2) + .04 = 1.04.
  assert sd.max_context_spans(spans, 6) == [0, 0, 0, 1, 1, 1]
  # Equal scores (same length, same distance to an edge): the earlier window keeps it.
  # Position 3 in windows [0, 4] and [2, 6]: min(3, 1) = min(1, 3) = 1, both + 0.05: window 0.
  spans = [sd.DocSpan(0, 5), sd.DocSpan(2, 5)]
  assert sd.max_context_spans(spans, 7) == [0, 0, 0, 0, 1, 1, 1]
  for spans_ in ([sd.DocSpan(0, 5), sd.DocSpan(2, 5), sd.DocSpan(4, 3)],
                 [sd.DocSpan(0, 3), sd.DocSpan(1, 3)]):
    best = sd.max_context_spans(spans_, 7)
    for p in range(7):
      for w in range(len(spans_)):
        assert sd._check_is_max_context(spans_, w, p) == (best[p] == w)


def test_answer_inside_a_punctuated_word_is_tightened(tokenizer, tmp_path):
  context = "He lived (1895-1943). Then"
  path = write_squad(tmp_path / "a.json", [(context, [
      qa("q1", "When was he born?", "1895", context.index("1895")),
      qa("q2", "Which people?", "Japan", 0)])])
  # q2's answer "Japan" is inside the word "Japanese" of another context below.
  ctx2 = "Japanese gardens"
  path2 = write_squad(tmp_path / "b.json", [(ctx2, [qa("q2", "Which people?", "Japan", 0)])])
  (example,) = sd.read_squad_examples(path, True)[:1]
  assert (example.start_position, example.end_position) == (2, 2)  # the word "(1895-1943)."
  (feature,) = features_of([example], tokenizer, True)
  answer = feature.tokens[feature.start_position:feature.end_position + 1]
  assert answer == ["1895"]  # not ( 1895 - 1943 ) .
  (example2,) = sd.read_squad_examples(path2, True)
  (feature2,) = features_of([example2], tokenizer, True)
  # "Japan" is not a whole WordPiece of "japanese": the whole word stays the answer.
  assert feature2.tokens[feature2.start_position:feature2.end_position + 1] == ["japanese"]


def test_training_labels_window_without_answer_and_impossible(tokenizer, tmp_path):
  words = [f"w{i}" for i in range(30)]
  context = " ".join(words)
  start = context.index("w25")
  path = write_squad(tmp_path / "a.json", [(context, [
      qa("a", "q", "w25", start, impossible=False), qa("b", "q", impossible=True)])], "v2.0")
  examples = sd.read_squad_examples(path, True, version_2_with_negative=True)
  feats = features_of(examples, tokenizer, True, max_seq_length=32, doc_stride=10)
  by_example = collections.defaultdict(list)
  for f in feats:
    by_example[f.example_index].append(f)
  for f in by_example[0]:
    inside = f.start_position != 0
    if inside:
      assert f.tokens[f.start_position] == "w" and f.tokens[f.end_position] == "##25"
    else:
      assert f.end_position == 0
  assert any(f.start_position for f in by_example[0])
  assert all(f.start_position == f.end_position == 0 and f.is_impossible
             for f in by_example[1])
  # unique_ids count from 1000000000 across examples.
  assert [f.unique_id for f in feats] == list(range(1000000000, 1000000000 + len(feats)))


def results_for(features, picks, seq):
  """RawResults whose logits are 0 except `picks`: {unique_id: (start pos, end pos, value)}."""
  results = []
  for f in features:
    start, end = np.full(seq, -5.0, np.float32), np.full(seq, -5.0, np.float32)
    for s, e, value in picks.get(f.unique_id, []):
      start[s] = value
      end[e] = value
    results.append(sa.RawResult(f.unique_id, start.tolist(), end.tolist()))
  return results


def test_v2_threshold_sign_and_null_odds(tokenizer, tmp_path):
  context = "The cat sat on the mat"
  path = write_squad(tmp_path / "a.json", [(context, [qa("q", "Where?")])])
  examples = sd.read_squad_examples(path, False)
  (feature,) = features_of(examples, tokenizer, False)
  mat = feature.tokens.index("mat")
  # Null score 2 + 2 = 4 at [CLS]; best span "mat" 1.5 + 1.5 = 3: diff = 1.
  (result,) = results_for([feature], {feature.unique_id: [(0, 0, 2.0), (mat, mat, 1.5)]}, 64)
  for threshold, answer in ((0.0, ""), (0.99, ""), (1.0, "mat"), (2.0, "mat")):
    predictions, nbest, odds = sa.postprocess(examples, [feature], [result], 20, 30, True,
                                              True, threshold)
    assert predictions["q"] == answer, threshold
    assert odds["q"] == pytest.approx(1.0)
  assert nbest["q"][0]["text"] == "" and nbest["q"][1]["text"] == "mat"
  assert sum(e["probability"] for e in nbest["q"]) == pytest.approx(1.0)
  # SQuAD 1.1 ignores the null score.
  predictions, _, odds = sa.postprocess(examples, [feature], [result], 20, 30, True, False)
  assert predictions["q"] == "mat" and not odds


def test_no_valid_span_is_handled_where_the_original_crashes(tokenizer, tmp_path):
  path = write_squad(tmp_path / "a.json", [("The cat sat", [qa("q", "Where is it?")]),
                                           ("", [qa("empty", "Anything?")])])
  examples = sd.read_squad_examples(path, False)
  feats = features_of(examples, tokenizer, False)
  assert [f.example_index for f in feats] == [0]  # the empty context has no window
  # The top start and end logits are all in the question part: no valid span at all.
  question_positions = [(p, p, 3.0) for p in range(1, 5)]
  results = results_for(feats, {feats[0].unique_id: question_positions}, 64)
  predictions, nbest, odds = sa.postprocess(examples, feats, results, 4, 30, True, True)
  assert predictions == {"q": "", "empty": ""}
  assert odds == {"q": sa.NO_ANSWER_SCORE_DIFF, "empty": sa.NO_ANSWER_SCORE_DIFF}
  assert [e["text"] for e in nbest["q"]] == [""]
  _, _, _, crashed = ref.predictions(examples, feats, results, 4, 30, True, True, 0.0)
  assert crashed == ["q", "empty"]  # where the original raises
  # SQuAD 1.1: the original's "empty" placeholder.
  predictions, nbest, _ = sa.postprocess(examples, feats, results, 4, 30, True, False)
  assert predictions == {"q": "empty", "empty": "empty"}
  assert nbest["q"] == [{"text": "empty", "probability": 1.0, "start_logit": 0.0,
                         "end_logit": 0.0}]


def test_answers_not_at_their_offset_are_skipped_and_counted(tmp_path, caplog):
  context = "alpha beta gamma"
  path = write_squad(tmp_path / "a.json", [(context, [
      qa("ok", "q", "beta", 6), qa("moved", "q", "beta", 0), qa("outside", "q", "beta", 99)])])
  stats = {}
  examples = sd.read_squad_examples(path, True, stats=stats)
  assert [e.qas_id for e in examples] == ["ok"]
  assert stats == {"questions": 3, "skipped": 2}
  assert "Could not find answer" in caplog.text
  # At prediction time answers are not read: every question is kept.
  assert len(sd.read_squad_examples(path, False)) == 3


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"version": "1.1"}', "no 'data' key"),
    ('{"data": [{"paragraphs": [{"qas": []}]}]}', "no 'context' key"),
    ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"question": "q"}]}]}]}',
     "no 'id' key"),
    ('{"data": [{"paragraphs": [{"context": "x y", "qas": [{"id": "q7", "question": "q", '
     '"answers": [{"text": "x", "answer_start": 0}, {"text": "y", "answer_start": 2}]}]}]}]}',
     "'q7'.*exactly 1 answer"),
])
def test_malformed_files_name_the_file_and_the_key(tmp_path, content, message):
  path = tmp_path / "bad.json"
  path.write_text(content, encoding="utf-8")
  with pytest.raises(sd.SquadFormatError, match=message) as error:
    sd.read_squad_examples(str(path), True)
  assert str(path) in str(error.value)


@pytest.mark.parametrize("second_id, where", [
    ("a", "article 0 paragraph 0 question 0 and by article 0 paragraph 1 question 1"),
    # The integer 7 and the string "7" are one key of the prediction files' JSON objects.
    (7, "article 0 paragraph 0 question 1 and by article 0 paragraph 1 question 1"),
])
def test_duplicate_question_ids_are_refused_naming_both(tmp_path, second_id, where):
  path = write_squad(tmp_path / "dup.json", [
      ("alpha beta", [qa("a", "q", "beta", 6), qa("7", "q", "alpha", 0)]),
      ("gamma delta", [qa("b", "q", "delta", 6), qa(second_id, "q", "gamma", 0)])])
  for is_training in (True, False):
    with pytest.raises(sd.SquadFormatError) as e:
      sd.read_squad_examples(path, is_training)
    assert str(e.value).startswith(f"{path}: question id {second_id!r} is used twice: by "
                                   f"{where};")
  bad = write_squad(tmp_path / "list_id.json", [("x", [dict(qa("a", "q"), id=["a"])])])
  with pytest.raises(sd.SquadFormatError, match="'id' must be a str/int, got list"):
    sd.read_squad_examples(bad, False)


@pytest.mark.parametrize("contexts", [["", ""], ["\u200b \u0301", ""]])
def test_training_examples_without_any_window_are_one_error(tokenizer, tmp_path, contexts):
  path = write_squad(tmp_path / "a.json", [
      (c, [qa(f"q{i}", "Where?", impossible=True)]) for i, c in enumerate(contexts)], "v2.0")
  examples = sd.read_squad_examples(path, True, version_2_with_negative=True)
  assert len(examples) == 2
  with pytest.raises(sd.SquadFormatError) as e:
    features_of(examples, tokenizer, True)
  assert str(e.value) == (
      "no training window: the contexts of all 2 training question(s) have no WordPiece "
      "(empty, or only characters the tokenizer drops), so there is nothing to train on")
  # Prediction has no such limit: each question without a window is answered "" / "empty".
  assert features_of(examples, tokenizer, False) == []


def test_impossible_flag_is_required_for_v2_training(tmp_path):
  path = write_squad(tmp_path / "a.json", [("x", [qa("q9", "q", "x", 0)])], "v2.0")
  with pytest.raises(sd.SquadFormatError, match="'q9'.*is_impossible"):
    sd.read_squad_examples(path, True, version_2_with_negative=True)


def test_feature_writer_leaves_nothing_when_conversion_fails(tokenizer, tmp_path):
  path = str(tmp_path / "train.tf_record")
  examples = sd.read_squad_examples(os.path.join(SQUAD, "train-v1.1.json"), True)[:5]
  with pytest.raises(RuntimeError):
    with sd.FeatureWriter(path, is_training=True) as writer:
      def fail_after_two(feature):
        if writer.num_features == 2:
          raise RuntimeError("interrupted")
        writer.process_feature(feature)
      sd.convert_examples_to_features(examples, tokenizer, 64, 16, 12, True, fail_after_two)
  assert os.listdir(tmp_path) == []


# === Equality with the original's loops ===


def assert_same_features(ours, theirs, is_training):
  assert len(ours) == len(theirs)
  for a, b in zip(ours, theirs):
    for field in FEATURE_FIELDS:
      assert getattr(a, field) == getattr(b, field), (field, a.unique_id)
    assert sd.serialize_feature(a, is_training) == \
        ref.feature_record(b, is_training).SerializeToString(deterministic=True)


def assert_same_examples(ours, theirs):
  assert [(e.qas_id, e.question_text, e.doc_tokens, e.orig_answer_text, e.start_position,
           e.end_position, e.is_impossible) for e in ours] == \
      [(e.qas_id, e.question_text, e.doc_tokens, e.orig_answer_text, e.start_position,
        e.end_position, e.is_impossible) for e in theirs]


def random_results(features, seq, seed, peaked=True):
  """Logits with a few strong positions per window (like a trained model) or pure noise."""
  rng = np.random.default_rng(seed)
  results = []
  for f in features:
    start = rng.normal(size=seq).astype(np.float32)
    end = rng.normal(size=seq).astype(np.float32)
    if peaked:
      n = sum(f.input_mask)
      for logits in (start, end):
        logits[rng.integers(0, n, size=3)] += rng.uniform(2, 6, size=3).astype(np.float32)
    results.append(sa.RawResult(f.unique_id, start.tolist(), end.tolist()))
  return results


def assert_same_predictions(examples, features, rexamples, rfeatures, results, v2, **kw):
  args = dict(n_best_size=kw.get("n_best_size", 20), max_answer_length=kw.get("max_answer", 30),
              do_lower_case=True)
  ours = sa.postprocess(examples, features, results, version_2_with_negative=v2,
                        null_score_diff_threshold=kw.get("threshold", 0.0), **args)
  *theirs, crashed = ref.predictions(rexamples, rfeatures, results, args["n_best_size"],
                                     args["max_answer_length"], True, v2,
                                     kw.get("threshold", 0.0))
  for qid in crashed:  # the original raises there; we answer "" (see the crash test)
    assert ours[0][qid] == "" and ours[2][qid] == sa.NO_ANSWER_SCORE_DIFF
  for mine, original in zip(ours, theirs):
    mine = collections.OrderedDict((k, v) for k, v in mine.items() if k not in crashed)
    assert json.dumps(mine, indent=4) == json.dumps(original, indent=4)
  return ours, crashed


def _fixture_cases():
  """(max_seq_length, doc_stride, max_query_length, name, v2): every fixture in many short
  windows and in the original's default windows; the dev and edge fixtures also in between
  (the training fixtures in between cost a fifth of this test's time, for windows the two
  others bracket)."""
  cases = []
  for geometry in ((64, 16, 12), (128, 64, 32), (384, 128, 64)):
    for name, v2 in (("train-v1.1.json", False), ("dev-v1.1.json", False),
                     ("train-v2.0.json", True), ("dev-v2.0.json", True), ("edge-v2.0.json", True)):
      train = name.startswith("train")
      if train and geometry == (128, 64, 32):
        continue
      cases.append(pytest.param(*geometry, name, v2, marks=[pytest.mark.slow] if train else []))
  return cases


@pytest.mark.parametrize("max_seq_length, doc_stride, max_query_length, name, v2",
                         _fixture_cases())
def test_fixtures_equal_the_originals_loops(tokenizer, name, v2, max_seq_length, doc_stride,
                                            max_query_length):
  path = os.path.join(SQUAD, name)
  modes = [False] + ([True] if name.startswith(("train", "edge")) else [])
  for is_training in modes:
    examples = sd.read_squad_examples(path, is_training, v2)
    rexamples = ref.read_examples(path, is_training, v2)
    assert_same_examples(examples, rexamples)
    ours, theirs = [], []
    count = sd.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                            max_query_length, is_training, ours.append)
    ref.convert(rexamples, tokenizer, max_seq_length, doc_stride, max_query_length,
                is_training, theirs.append)
    assert count == len(ours)
    # Unread windows: records from the shared varints, candidates from the paragraph's lists.
    unread = []
    sd.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                    max_query_length, is_training, unread.append)
    assert all(f.doc_part() is not None and f.packed_sequences() is not None for f in unread)
    assert [sd.serialize_feature(f, is_training) for f in unread] == [
        ref.feature_record(f, is_training).SerializeToString(deterministic=True) for f in theirs]
    if not is_training:
      results = random_results(theirs, max_seq_length, seed=max_seq_length)
      assert_same_predictions(examples, unread, rexamples, theirs, results, v2)
      assert all(f.doc_part() is not None for f in unread)  # post-processing read none
    # Read windows (every field built and kept): the same features, records and predictions.
    assert_same_features(ours, theirs, is_training)
    assert all(f.doc_part() is None and f.packed_sequences() is None for f in ours)
    if not is_training:
      results = random_results(ours, max_seq_length, seed=max_seq_length)
      for threshold in (0.0, -2.0, 3.0):
        assert_same_predictions(examples, ours, rexamples, theirs, results, v2,
                                threshold=threshold)
      assert_same_predictions(examples, ours, rexamples, theirs,
                              random_results(ours, max_seq_length, 7, peaked=False), v2,
                              n_best_size=5, max_answer=4)


# Contexts from words with punctuation, accents, digits, [UNK]-makers and odd spacing.
_WORDS = ["The", "cat", "(1895-1943).", "Smith's", "café", "Cafe\u0301", "naïve", "U.S.",
          "x", "don't", "\u2603", "running", "Japanese", "12,000", "über", "A", "the", "ok",
          "\u200b", "zwi\u200bschen"]  # a word the BasicTokenizer empties, one it shortens
_SPACES = [" ", " ", " ", "  ", "\n", "\t", " \u202f", "\u00a0"]


@st.composite
def squad_files(draw):
  rng = random.Random(draw(st.integers(0, 2 ** 32)))
  paragraphs = []
  for p in range(draw(st.integers(1, 3))):
    words = [rng.choice(_WORDS) for _ in range(draw(st.integers(0, 60)))]
    context = "".join(w + rng.choice(_SPACES) for w in words).rstrip(" ") if words else ""
    qas = []
    for q in range(draw(st.integers(1, 3))):
      question = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 20)))
      if context and rng.random() < 0.8:
        start = rng.randrange(len(context))
        length = rng.randint(1, min(25, len(context) - start))
        qas.append(qa(f"p{p}q{q}", question, context[start:start + length], start,
                      impossible=False))
      else:
        qas.append(qa(f"p{p}q{q}", question, impossible=True))
    paragraphs.append((context, qas))
  return paragraphs


@settings(max_examples=40, deadline=None)
@given(paragraphs=squad_files(), max_seq_length=st.sampled_from([24, 40, 64]),
       doc_stride=st.integers(1, 20), seed=st.integers(0, 1000))
def test_generated_contexts_equal_the_originals_loops(tmp_path_factory, paragraphs,
                                                      max_seq_length, doc_stride, seed):
  tok = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  path = write_squad(tmp_path_factory.mktemp("gen") / "g.json", paragraphs, "v2.0")
  for is_training in (True, False):
    examples = sd.read_squad_examples(path, is_training, True)
    rexamples = ref.read_examples(path, is_training, True)
    assert_same_examples(examples, rexamples)
    ours, theirs = [], []
    ref.convert(rexamples, tok, max_seq_length, doc_stride, 8, is_training, theirs.append)
    if is_training and examples and not theirs:
      # No context has a WordPiece: refused (the original went on to train on nothing).
      with pytest.raises(sd.SquadFormatError, match="no training window"):
        sd.convert_examples_to_features(examples, tok, max_seq_length, doc_stride, 8, True,
                                        ours.append)
      continue
    sd.convert_examples_to_features(examples, tok, max_seq_length, doc_stride, 8, is_training,
                                    ours.append)
    assert_same_features(ours, theirs, is_training)
  results = random_results(ours, max_seq_length, seed)
  unread = []  # windows whose fields were never read: post-processing's own path
  sd.convert_examples_to_features(examples, tok, max_seq_length, doc_stride, 8, False,
                                  unread.append)
  for v2 in (False, True):
    assert_same_predictions(examples, ours, rexamples, theirs, results, v2)
    assert_same_predictions(examples, unread, rexamples, theirs, results, v2)


def test_written_files_are_the_originals_format(tokenizer, tmp_path):
  path = os.path.join(SQUAD, "dev-v2.0.json")
  examples = sd.read_squad_examples(path, False)[:30]
  feats = features_of(examples, tokenizer, False, 128, 64, 32)
  results = random_results(feats, 128, 3)
  files = [str(tmp_path / n) for n in ("p.json", "n.json", "o.json")]
  predictions, nbest, odds = sa.write_predictions(examples, feats, results, 20, 30, True, *files,
                                                  version_2_with_negative=True)
  texts = [open(f, encoding="utf-8").read() for f in files]
  assert texts == [json.dumps(x, indent=4) + "\n" for x in (predictions, nbest, odds)]
  assert list(json.loads(texts[0])) == [e.qas_id for e in examples]
  assert list(json.loads(texts[1])[examples[0].qas_id][0]) == \
      ["text", "probability", "start_logit", "end_logit"]
  # v1 writes no null_odds.json
  os.remove(files[2])
  sa.write_predictions(examples, feats, results, 20, 30, True, *files)
  assert not os.path.exists(files[2])
  # Re-deciding at another threshold from the n-best and the odds equals a re-run.
  for threshold in (-3.0, 0.5, 4.0):
    again = sa.postprocess(examples, feats, results, 20, 30, True, True, threshold)[0]
    assert sa.predictions_from_nbest(nbest, odds, threshold) == again


def test_records_parse_back_to_the_features(tokenizer, tmp_path):
  path = os.path.join(SQUAD, "train-v2.0.json")
  examples = sd.read_squad_examples(path, True, True)[:40]
  record_file = str(tmp_path / "train.tf_record")
  kept = []
  with sd.FeatureWriter(record_file, is_training=True) as writer:
    def keep(feature):
      kept.append(feature)
      writer.process_feature(feature)
    sd.convert_examples_to_features(examples, tokenizer, 64, 16, 12, True, keep)
  records = list(tf.data.TFRecordDataset(record_file).as_numpy_iterator())
  assert len(records) == writer.num_features == len(kept)
  for record, feature in zip(records, kept):
    parsed = tf.train.Example.FromString(record).features.feature
    values = {k: list(v.int64_list.value) for k, v in parsed.items()}
    assert values == {"unique_ids": [feature.unique_id], "input_ids": feature.input_ids,
                      "input_mask": feature.input_mask, "segment_ids": feature.segment_ids,
                      "start_positions": [feature.start_position],
                      "end_positions": [feature.end_position],
                      "is_impossible": [int(feature.is_impossible)]}


# === The fast paths' fall-backs ===


def _shared_context_case(tokenizer, tmp_path):
  """One long paragraph (several windows) asked four questions of different lengths."""
  context = " ".join(f"word{i % 7} ({i}), Café" for i in range(40))
  qas = [qa(f"q{k}", "what " * (k * 3 + 1), "word3", context.index("word3"), impossible=False)
         for k in range(4)]
  path = write_squad(tmp_path / "shared.json", [(context, qas)], "v2.0")
  examples = sd.read_squad_examples(path, False, True)
  rexamples = ref.read_examples(path, False, True)
  ours, theirs = features_of(examples, tokenizer, False), []
  ref.convert(rexamples, tokenizer, 64, 16, 12, False, theirs.append)
  assert len({id(e.doc_tokens) for e in examples}) == 1 and len(ours) > 8
  return examples, rexamples, ours, theirs


def test_serialized_ids_follow_edits_after_conversion(tokenizer, tmp_path):
  # Conversion keeps the input_ids' record bytes from the paragraph's shared pieces; a feature
  # whose ids were changed afterwards is serialised from its new ids.
  _, _, ours, theirs = _shared_context_case(tokenizer, tmp_path)
  assert_same_features(ours, theirs, False)
  for feature, original in zip(ours[:3], theirs[:3]):
    feature.input_ids[5] = original.input_ids[5] = 7
    feature.input_ids[-1] = original.input_ids[-1] = 300000  # outside the varint table
    assert sd.serialize_feature(feature, False) == \
        ref.feature_record(original, False).SerializeToString(deterministic=True)


class NoVocabTokenizer:
  """Only tokenize and convert_tokens_to_ids: no vocab to take ids from."""

  def __init__(self, inner):
    self.tokenize = inner.tokenize
    self.convert_tokens_to_ids = inner.convert_tokens_to_ids


def test_a_tokenizer_without_vocab_gives_the_same_features(tokenizer, tmp_path):
  examples, rexamples, _, theirs = _shared_context_case(tokenizer, tmp_path)
  ours = features_of(examples, NoVocabTokenizer(tokenizer), False)
  assert all(f.packed_sequences() is None for f in ours)  # ids from the tokenizer
  assert_same_features(ours, theirs, False)
  assert_same_predictions(examples, ours, rexamples, theirs, random_results(theirs, 64, 2), True)


def test_window_fields_are_built_once_and_can_be_assigned(tokenizer, tmp_path):
  _, _, ours, theirs = _shared_context_case(tokenizer, tmp_path)
  window, original = ours[4], theirs[4]
  assert isinstance(window, sd._Window) and window.doc_part() is not None
  assert window.peek("input_ids") == original.input_ids and window.doc_part() is not None
  assert window.tokens is window.tokens and window.doc_part() is None
  assert window.packed_sequences() is not None  # the ids are still unread
  window.segment_ids = [0] * 64  # assigned like any attribute: the record follows
  original.segment_ids = [0] * 64
  assert window.packed_sequences() is None
  assert sd.serialize_feature(window, False) == \
      ref.feature_record(original, False).SerializeToString(deterministic=True)


@pytest.mark.parametrize("shift", ["all", "odd"])
def test_word_maps_outside_the_paragraph_slice_as_the_original(tokenizer, tmp_path, shift):
  # A feature whose token_to_orig_map holds negative word indexes: the original slices
  # doc_tokens[first:last + 1] as Python does (the same words, or none when the slice is
  # reversed); ours takes the general path there and must give the same files.
  examples, rexamples, ours, theirs = _shared_context_case(tokenizer, tmp_path)
  num_words = len(examples[0].doc_tokens)
  for feature in ours + theirs:
    feature.token_to_orig_map = {
        k: v - num_words if shift == "all" or k % 2 else v
        for k, v in feature.token_to_orig_map.items()}
  results = random_results(theirs, 64, 11)
  for v2 in (False, True):
    assert_same_predictions(examples, ours, rexamples, theirs, results, v2)


def test_tied_logits_and_uneven_results_rank_as_the_original(tokenizer, tmp_path):
  examples, rexamples, ours, theirs = _shared_context_case(tokenizer, tmp_path)
  rng = np.random.default_rng(3)
  # Integer logits: ties at the n-th best position (the full stable sort decides).
  tied = [sa.RawResult(f.unique_id, rng.integers(-2, 3, 64).astype(float).tolist(),
                       rng.integers(-2, 3, 64).astype(float).tolist()) for f in ours]
  # Logits of different lengths per window (the per-window path).
  uneven = [sa.RawResult(f.unique_id, r.start_logits[:40 + i % 20], r.end_logits[:50])
            for i, (f, r) in enumerate(zip(ours, random_results(ours, 64, 5)))]
  for results in (tied, uneven):
    for v2 in (False, True):
      assert_same_predictions(examples, ours, rexamples, theirs, results, v2, n_best_size=7)


def test_garbage_collector_state_is_restored(tokenizer, tmp_path):
  import gc  # pylint: disable=g-import-not-at-top
  examples, _, ours, _ = _shared_context_case(tokenizer, tmp_path)
  results = random_results(ours, 64, 1)

  def fail(feature):
    raise RuntimeError("stop")
  for enabled in (True, False):
    (gc.enable if enabled else gc.disable)()
    try:
      features_of(examples, tokenizer, False)
      with pytest.raises(RuntimeError):
        sd.convert_examples_to_features(examples, tokenizer, 64, 16, 12, False, fail)
      sa.postprocess(examples, ours, results, 20, 30, True)
      assert gc.isenabled() == enabled
    finally:
      gc.enable()
