"""A literal, slow re-statement of the original run_squad.py's data loops (the test oracle).

Every function here follows the original's control flow step by step (character loop over the
context, a max-context scan over all windows for every token, string joins in
_improve_answer_span, sorted() for the n-best indexes, tf.train.Example for the records), with
none of the shortcuts of bert_tf.tasks.squad.data and squad_answers, so the tests can check
that the fast internals give the same examples, features, records and prediction files.
benchmarks/squad.py times it (with the original's character-at-a-time tokenizer) as the
original's speed. Written for this project from the behaviour described in
../shared/spec/ORIGINAL_FINETUNING.md §2.
"""

import collections
import json
import math

import tensorflow as tf

from bert_tf import tokenization


class Example:
  def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text, start_position,
               end_position, is_impossible):
    self.qas_id = qas_id
    self.question_text = question_text
    self.doc_tokens = doc_tokens
    self.orig_answer_text = orig_answer_text
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible


class Feature:
  def __init__(self, **kwargs):
    self.__dict__.update(kwargs)


def read_examples(input_file, is_training, version_2_with_negative):
  with tf.io.gfile.GFile(input_file, "r") as f:
    articles = json.load(f)["data"]
  examples = []
  for article in articles:
    for paragraph in article["paragraphs"]:
      context = paragraph["context"]
      words, offsets = [], []
      after_space = True
      for ch in context:
        if ch in (" ", "\t", "\r", "\n") or ord(ch) == 0x202F:
          after_space = True
        else:
          if after_space:
            words.append(ch)
          else:
            words[-1] += ch
          after_space = False
        offsets.append(len(words) - 1)
      for qa in paragraph["qas"]:
        start = end = answer_text = None
        impossible = False
        if is_training:
          if version_2_with_negative:
            impossible = qa["is_impossible"]
          if len(qa["answers"]) != 1 and not impossible:
            raise ValueError("need exactly one answer")
          if not impossible:
            answer = qa["answers"][0]
            answer_text = answer["text"]
            start = offsets[answer["answer_start"]]
            end = offsets[answer["answer_start"] + len(answer_text) - 1]
            found = " ".join(words[start:end + 1])
            wanted = " ".join(tokenization.whitespace_tokenize(answer_text))
            if found.find(wanted) == -1:
              continue
          else:
            start, end, answer_text = -1, -1, ""
        examples.append(Example(qa["id"], qa["question"], words, answer_text, start, end,
                                impossible))
  return examples


def improve_span(doc_tokens, start, end, tokenizer, answer_text):
  wanted = " ".join(tokenizer.tokenize(answer_text))
  for new_start in range(start, end + 1):
    for new_end in range(end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == wanted:
        return new_start, new_end
  return start, end


def is_max_context(spans, span_index, position):
  best_score, best_index = None, None
  for i, (span_start, span_length) in enumerate(spans):
    span_end = span_start + span_length - 1
    if position < span_start or position > span_end:
      continue
    score = min(position - span_start, span_end - position) + 0.01 * span_length
    if best_score is None or score > best_score:
      best_score, best_index = score, i
  return span_index == best_index


def convert(examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training,
            output_fn):
  unique_id = 1000000000
  for example_index, example in enumerate(examples):
    query = tokenizer.tokenize(example.question_text)
    if len(query) > max_query_length:
      query = query[0:max_query_length]
    tok_to_orig, orig_to_tok, doc = [], [], []
    for i, word in enumerate(example.doc_tokens):
      orig_to_tok.append(len(doc))
      for piece in tokenizer.tokenize(word):
        tok_to_orig.append(i)
        doc.append(piece)
    tok_start = tok_end = None
    if is_training and example.is_impossible:
      tok_start = tok_end = -1
    if is_training and not example.is_impossible:
      tok_start = orig_to_tok[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end = orig_to_tok[example.end_position + 1] - 1
      else:
        tok_end = len(doc) - 1
      tok_start, tok_end = improve_span(doc, tok_start, tok_end, tokenizer,
                                        example.orig_answer_text)
    room = max_seq_length - len(query) - 3
    spans = []
    offset = 0
    while offset < len(doc):
      length = len(doc) - offset
      if length > room:
        length = room
      spans.append((offset, length))
      if offset + length == len(doc):
        break
      offset += min(length, doc_stride)
    for span_index, (span_start, span_length) in enumerate(spans):
      tokens, segments = ["[CLS]"], [0]
      to_orig, max_ctx = {}, {}
      for t in query:
        tokens.append(t)
        segments.append(0)
      tokens.append("[SEP]")
      segments.append(0)
      for i in range(span_length):
        position = span_start + i
        to_orig[len(tokens)] = tok_to_orig[position]
        max_ctx[len(tokens)] = is_max_context(spans, span_index, position)
        tokens.append(doc[position])
        segments.append(1)
      tokens.append("[SEP]")
      segments.append(1)
      ids = tokenizer.convert_tokens_to_ids(tokens)
      mask = [1] * len(ids)
      while len(ids) < max_seq_length:
        ids.append(0)
        mask.append(0)
        segments.append(0)
      start_position = end_position = None
      if is_training and not example.is_impossible:
        if tok_start >= span_start and tok_end <= span_start + span_length - 1:
          start_position = tok_start - span_start + len(query) + 2
          end_position = tok_end - span_start + len(query) + 2
        else:
          start_position = end_position = 0
      if is_training and example.is_impossible:
        start_position = end_position = 0
      output_fn(Feature(unique_id=unique_id, example_index=example_index,
                        doc_span_index=span_index, tokens=tokens, token_to_orig_map=to_orig,
                        token_is_max_context=max_ctx, input_ids=ids, input_mask=mask,
                        segment_ids=segments, start_position=start_position,
                        end_position=end_position, is_impossible=example.is_impossible))
      unique_id += 1


def feature_record(feature, is_training):
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))
  entries = collections.OrderedDict()
  entries["unique_ids"] = ints([feature.unique_id])
  entries["input_ids"] = ints(feature.input_ids)
  entries["input_mask"] = ints(feature.input_mask)
  entries["segment_ids"] = ints(feature.segment_ids)
  if is_training:
    entries["start_positions"] = ints([feature.start_position])
    entries["end_positions"] = ints([feature.end_position])
    entries["is_impossible"] = ints([1 if feature.is_impossible else 0])
  return tf.train.Example(features=tf.train.Features(feature=entries))


def best_indexes(logits, n_best_size):
  ranked = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
  return [index for index, _ in ranked[:n_best_size]]


def softmax(scores):
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(s - top) for s in scores]
  total = 0.0
  for x in exps:
    total += x
  return [x / total for x in exps]


def final_text(pred_text, orig_text, do_lower_case):
  def strip_spaces(text):
    chars, ns_to_s = [], collections.OrderedDict()
    for i, c in enumerate(text):
      if c == " ":
        continue
      ns_to_s[len(chars)] = i
      chars.append(c)
    return "".join(chars), ns_to_s

  tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start == -1:
    return orig_text
  end = start + len(pred_text) - 1
  orig_ns, orig_map = strip_spaces(orig_text)
  tok_ns, tok_map = strip_spaces(tok_text)
  if len(orig_ns) != len(tok_ns):
    return orig_text
  tok_s_to_ns = {s: ns for ns, s in tok_map.items()}
  orig_start = orig_map.get(tok_s_to_ns[start]) if start in tok_s_to_ns else None
  if orig_start is None:
    return orig_text
  orig_end = orig_map.get(tok_s_to_ns[end]) if end in tok_s_to_ns else None
  if orig_end is None:
    return orig_text
  return orig_text[orig_start:orig_end + 1]


def predictions(examples, features, results, n_best_size, max_answer_length, do_lower_case,
                version_2_with_negative, null_score_diff_threshold):
  """(predictions, nbest, null odds, crashed) as the original computes them. `crashed` lists the
  questions where the original raises (no window at all in SQuAD 2.0: IndexError; no non-null
  entry in the n-best: AttributeError); they are left out of the three dicts."""
  by_example = collections.defaultdict(list)
  for feature in features:
    by_example[feature.example_index].append(feature)
  by_id = {r.unique_id: r for r in results}
  all_predictions, all_nbest, all_diff = (collections.OrderedDict() for _ in range(3))
  crashed = []
  Prelim = collections.namedtuple("Prelim", "feature_index start_index end_index start_logit "
                                  "end_logit")
  NBest = collections.namedtuple("NBest", "text start_logit end_logit")
  for example_index, example in enumerate(examples):
    example_features = by_example[example_index]
    prelim = []
    score_null, null_index, null_start, null_end = 1000000, 0, 0, 0
    for feature_index, feature in enumerate(example_features):
      result = by_id[feature.unique_id]
      starts = best_indexes(result.start_logits, n_best_size)
      ends = best_indexes(result.end_logits, n_best_size)
      if version_2_with_negative:
        null_score = result.start_logits[0] + result.end_logits[0]
        if null_score < score_null:
          score_null, null_index = null_score, feature_index
          null_start, null_end = result.start_logits[0], result.end_logits[0]
      for s in starts:
        for e in ends:
          if s >= len(feature.tokens) or e >= len(feature.tokens):
            continue
          if s not in feature.token_to_orig_map or e not in feature.token_to_orig_map:
            continue
          if not feature.token_is_max_context.get(s, False):
            continue
          if e < s or e - s + 1 > max_answer_length:
            continue
          prelim.append(Prelim(feature_index, s, e, result.start_logits[s],
                               result.end_logits[e]))
    if version_2_with_negative:
      prelim.append(Prelim(null_index, 0, 0, null_start, null_end))
    if version_2_with_negative and not example_features:
      crashed.append(example.qas_id)  # features[0] of an empty list
      continue
    prelim = sorted(prelim, key=lambda x: x.start_logit + x.end_logit, reverse=True)
    seen, nbest = {}, []
    for pred in prelim:
      if len(nbest) >= n_best_size:
        break
      feature = example_features[pred.feature_index]
      if pred.start_index > 0:
        tok_text = " ".join(feature.tokens[pred.start_index:pred.end_index + 1])
        tok_text = tok_text.replace(" ##", "").replace("##", "")
        tok_text = " ".join(tok_text.strip().split())
        orig_text = " ".join(example.doc_tokens[feature.token_to_orig_map[pred.start_index]:
                                                feature.token_to_orig_map[pred.end_index] + 1])
        text = final_text(tok_text, orig_text, do_lower_case)
        if text in seen:
          continue
        seen[text] = True
      else:
        text = ""
        seen[text] = True
      nbest.append(NBest(text, pred.start_logit, pred.end_logit))
    if version_2_with_negative and "" not in seen:
      nbest.append(NBest("", null_start, null_end))
    if not nbest:
      nbest.append(NBest("empty", 0.0, 0.0))
    scores = [n.start_logit + n.end_logit for n in nbest]
    best_non_null = None
    for n in nbest:
      if not best_non_null and n.text:
        best_non_null = n
    probs = softmax(scores)
    entries = []
    for i, n in enumerate(nbest):
      entry = collections.OrderedDict()
      entry["text"], entry["probability"] = n.text, probs[i]
      entry["start_logit"], entry["end_logit"] = n.start_logit, n.end_logit
      entries.append(entry)
    if not version_2_with_negative:
      all_predictions[example.qas_id] = entries[0]["text"]
    elif best_non_null is None:
      crashed.append(example.qas_id)  # best_non_null_entry.start_logit of None
      continue
    else:
      diff = score_null - best_non_null.start_logit - best_non_null.end_logit
      all_diff[example.qas_id] = diff
      all_predictions[example.qas_id] = "" if diff > null_score_diff_threshold else \
          best_non_null.text
    all_nbest[example.qas_id] = entries
  return all_predictions, all_nbest, all_diff, crashed
