"""Raw-text token classification (NER, chunking, POS) for TF Serving: run_ner's prediction in-graph.

`TaggerModule` takes raw texts and returns their words, each word's tag and the entities, as
`bert_tf.tasks.tagging_run` predicts them for the same words (the written
test_predictions.txt). Everything is a TensorFlow or tensorflow-text op, so TF Serving (or
`tf.saved_model.load` after `import tensorflow_text`) runs it without Python:

  1. words: the text split as the original BasicTokenizer splits it, on whitespace and around
     every punctuation character and CJK ideograph (each of those is a word of its own), with
     each word's code point offsets. Characters the tokenizer deletes (control characters) stay
     inside their word. A CoNLL file's words are such words when they hold no punctuation
     inside (CoNLL's "U.S." is one word there and four here).
  2. WordPieces of each word on its own (InGraphTokenizer: the reference FullTokenizer's ids); a
     word that tokenizes to nothing is one [UNK], as run_ner reads it.
  3. windows as tagging_data.plan_windows for a sentence that is its own context: the whole text
     in one window when it has at most seq_length - 2 pieces, else parts of
     (seq_length - 2) // 2 pieces by each word's first piece, each window starting a quarter
     window before its part.
  4. `[CLS] pieces [SEP]` padded to seq_length through the model; each word's tag is the argmax
     of the logits at its first piece, in the window that owns it.
  5. entities by conlleval's rules (tagging_metrics.entities in "conlleval" mode: an I- after O
     starts one), with the code point offsets of their first and last word.

Outputs per text (B texts, W = most words of a text in the batch, E = most entities):
  words [B, W] string, word_start / word_end [B, W] int32 (code points; -1 padding),
  tags [B, W] string, tag_probability [B, W] float32 (softmax of the chosen tag), num_words [B]
  int32; entity_type [B, E] string, entity_text [B, E] string, entity_start / entity_end
  [B, E] int32 (code points, end exclusive; -1 padding), num_entities [B] int32.
Texts are read as UTF-8 with invalid bytes dropped (offsets count the code points after that).
"""

from typing import Any, Mapping, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import text as text_lib
from bert_tf import tokenization
from bert_tf.config import BertConfig
from bert_tf.packing import Packer
from bert_tf.serving import tf_serving
from bert_tf.serving.modules import ReusableModule
from bert_tf.serving.modules import call_cut
from bert_tf.serving.modules import signature_function
from bert_tf.text import InGraphTokenizer

WARMUP_TEXTS = ("John Smith flew from Paris to New York on Monday.",
                "The quick brown fox jumps over the lazy dog. " * 40)
_STRINGS = tf.TensorSpec([None], tf.string)

# Tag prefix codes for the chunk rules (conlleval's, extended to E- and S- as seqeval's default
# mode): B, I, E, S, O, "." (treated as outside for type changes), "[" and "]" (one-word chunks)
# and anything else (no chunk of its own).
_PREFIXES = ("B", "I", "E", "S", "O", ".", "[", "]")
_OTHER = len(_PREFIXES)


def split_tag(tag: str):
  """(prefix, type) as conlleval splits a tag: at the first hyphen, else (tag, "")."""
  prefix, sep, kind = tag.partition("-")
  return (prefix, kind) if sep else (tag, "")


def is_word_delimiter(char: str) -> bool:
  """What the reference's word split splits on in raw text: its whitespace (cleaning's and
  str.split's), minus the characters cleaning deletes, which stay inside words."""
  t = tokenization
  return (t.is_whitespace(char) or char.isspace()) and not t.is_removed_when_cleaning(char)


def _word_split_patterns():
  """RE2 patterns: (delimiters, delimiters kept as words) of the BasicTokenizer's word split on
  raw text: whitespace (what the reference splits on, minus the characters its cleaning
  deletes, which stay inside words) and the characters that are words of their own."""
  t = tokenization
  space = text_lib.re2_class(t.codepoint_ranges(is_word_delimiter))
  alone = text_lib.re2_class(sorted(t.codepoint_ranges(t.is_punctuation) +
                                    tuple(t.CJK_RANGES)))
  return f"{space}|{alone}", alone


class TaggerModule(ReusableModule):
  """A fine-tuned tagger on raw text (see the module docstring).

  Signatures: serving_default and tag: text [B] string -> the outputs listed above.
  """

  def __init__(self, tokenizer: Union[InGraphTokenizer, Packer], model: keras.Model,
               seq_length: int, labels: Sequence[str]):
    super().__init__(name="bert_tagger")
    # With a Packer, windows run cut to its length buckets (modules.call_cut).
    self._width = tokenizer.width if isinstance(tokenizer, Packer) else None
    if isinstance(tokenizer, Packer):
      tokenizer = tokenizer.tokenizer
    if seq_length < 4:
      raise ValueError(f"seq_length must be at least 4, got {seq_length}")
    for token, token_id in (("[CLS]", tokenizer.cls_id), ("[SEP]", tokenizer.sep_id)):
      if token_id is None:
        raise ValueError(f"the vocab has no {token} token, needed for the windows")
    if not labels:
      raise ValueError("a tagger needs its labels")
    self.tokenizer = tokenizer
    self.model = model
    self.seq_length = int(seq_length)
    self.labels = [str(label) for label in labels]
    types = sorted({split_tag(label)[1] for label in self.labels})
    prefixes = [split_tag(label)[0] for label in self.labels]
    self._label_names = tf.constant(self.labels)
    self._label_prefix = tf.constant(
        [_PREFIXES.index(p) if p in _PREFIXES else _OTHER for p in prefixes], tf.int32)
    self._label_type = tf.constant([types.index(split_tag(label)[1]) for label in self.labels],
                                   tf.int32)
    self._type_names = tf.constant(types)
    # The type a sentence boundary compares as: "" (an O's type), or a type no label has.
    self._boundary_type = types.index("") if "" in types else -1
    self._delimiters, self._kept = _word_split_patterns()
    self.tag = signature_function(self._tag, [_STRINGS])
    self.serving_default = signature_function(self._tag, [_STRINGS])
    self.signature_functions = {"serving_default": self.serving_default, "tag": self.tag}
    # TF Hub: __call__ on the encoder's three inputs (the bert_preprocessor's output) ->
    # the model's logits, with its variables, for fine-tuning through hub.KerasLayer.
    self.make_reusable_on_ids(model)

  def _words(self, text):
    """Words [B, (W)] and their code point offsets (start, end) as RaggedTensors."""
    words, begin, end = tf_text.regex_split_with_offsets(text, self._delimiters, self._kept)
    # Byte offsets -> code point offsets, through the byte offset of every character.
    _, char_bytes = tf.strings.unicode_decode_with_offsets(text, "UTF-8")
    text_bytes = tf.strings.length(text)
    row_byte_start = tf.cumsum(tf.cast(text_bytes, tf.int64), exclusive=True)
    flat_char_bytes = char_bytes.flat_values + tf.gather(row_byte_start, char_bytes.value_rowids())
    row_char_start = char_bytes.row_starts()
    word_row = begin.value_rowids()
    offset = tf.gather(row_byte_start, word_row)
    start = tf.searchsorted(flat_char_bytes, begin.flat_values + offset, side="left", out_type=tf.int64)
    stop = tf.searchsorted(flat_char_bytes, end.flat_values + offset, side="left", out_type=tf.int64)
    char_start = start - tf.gather(row_char_start, word_row)
    char_end = stop - tf.gather(row_char_start, word_row)
    return (words, begin.with_flat_values(tf.cast(char_start, tf.int32)),
            begin.with_flat_values(tf.cast(char_end, tf.int32)))

  def _tag(self, text):
    S = self.seq_length  # pylint: disable=invalid-name
    budget = S - 2
    stride = max(1, budget // 2)
    left = (budget - stride) // 2
    text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore",
                                        replace_control_characters=False)
    words, word_start, word_end = self._words(text)
    flat_words = words.flat_values
    pieces = self.tokenizer.tokenize(flat_words)  # [N, (p)]
    empty = tf.equal(pieces.row_lengths(), 0)
    unk = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(empty, tf.int64))],
                tf.constant(self.tokenizer.unk_id, pieces.dtype)),
        tf.cast(empty, tf.int64))
    pieces = tf.concat([pieces, unk], axis=1)
    piece_ids = tf.cast(pieces.flat_values, tf.int32)
    # Pieces per text, and the first piece of each word within its text.
    text_piece_splits = tf.gather(pieces.row_splits, words.row_splits)
    num_pieces = text_piece_splits[1:] - text_piece_splits[:-1]  # [B]
    word_text = words.value_rowids()
    first_piece = pieces.row_splits[:-1] - tf.gather(text_piece_splits, word_text)  # [N]
    # Windows.
    long_text = num_pieces > budget
    num_windows = tf.where(long_text, (num_pieces + stride - 1) // stride,
                           tf.ones_like(num_pieces))
    window_splits = tf.concat([[0], tf.cumsum(num_windows)], axis=0)
    total_windows = window_splits[-1]
    window_text = tf.repeat(tf.range(tf.shape(num_pieces, out_type=tf.int64)[0]), num_windows)
    k = tf.range(total_windows) - tf.gather(window_splits, window_text)
    n = tf.gather(num_pieces, window_text)
    last_start = tf.maximum(n - budget, 0)
    window_start = tf.where(tf.gather(long_text, window_text),
                            tf.clip_by_value(k * stride - left, 0, last_start),
                            tf.zeros_like(k))
    length = tf.minimum(n - window_start, budget)  # pieces in the window
    position = tf.range(S, dtype=tf.int64)[tf.newaxis, :]
    is_piece = (position >= 1) & (position <= length[:, tf.newaxis])
    index = tf.gather(text_piece_splits, window_text)[:, tf.newaxis] + \
        window_start[:, tf.newaxis] + position - 1
    index = tf.clip_by_value(index, 0, tf.maximum(tf.shape(piece_ids, out_type=tf.int64)[0] - 1,
                                                  0))
    padded_ids = tf.concat([piece_ids, [0]], axis=0)
    ids = tf.where(is_piece, tf.gather(padded_ids, index), 0)
    ids = tf.where(tf.equal(position, 0), self.tokenizer.cls_id, ids)
    ids = tf.where(tf.equal(position, length[:, tf.newaxis] + 1), self.tokenizer.sep_id, ids)
    mask = tf.cast(position <= length[:, tf.newaxis] + 1, tf.int32)
    logits = call_cut(self.model, dict(input_word_ids=tf.cast(ids, tf.int32), input_mask=mask,
                                       input_type_ids=tf.zeros_like(mask)),
                      self._width, S, infer=self.infer)["logits"]
    logits = tf.cast(logits, tf.float32)
    # Each word's logits: in the window that owns its first piece.
    word_long = tf.gather(long_text, word_text)
    word_k = tf.where(word_long, first_piece // stride, tf.zeros_like(first_piece))
    word_window = tf.gather(window_splits, word_text) + word_k
    word_position = first_piece - tf.gather(window_start, word_window) + 1
    word_logits = tf.gather_nd(logits, tf.stack([word_window, word_position], axis=1))
    label = tf.argmax(word_logits, axis=-1, output_type=tf.int32)
    probability = tf.reduce_max(tf.nn.softmax(word_logits, axis=-1), axis=-1)
    tags = words.with_flat_values(tf.gather(self._label_names, label))
    entities = self._entities(text, words, label, word_start, word_end)
    return dict(
        words=words.to_tensor(""),
        word_start=word_start.to_tensor(-1),
        word_end=word_end.to_tensor(-1),
        tags=tags.to_tensor(""),
        tag_probability=words.with_flat_values(probability).to_tensor(0.0),
        num_words=tf.cast(words.row_lengths(), tf.int32),
        **entities)

  def _entities(self, text, words, label, word_start, word_end):
    """conlleval's chunks over each text's predicted tags."""
    prefix = tf.gather(self._label_prefix, label)
    kind = tf.gather(self._label_type, label)
    first = tf.equal(tf.range(tf.shape(label, out_type=tf.int64)[0]),
                     tf.gather(words.row_starts(), words.value_rowids()))
    outside = _PREFIXES.index("O")
    prev_prefix = tf.where(first, outside, tf.concat([[outside], prefix[:-1]], axis=0))
    prev_kind = tf.where(first, self._boundary_type, tf.concat([[0], kind[:-1]], axis=0))

    def p_is(tensor, *names):
      result = tf.zeros_like(tensor, tf.bool)
      for name in names:
        result |= tf.equal(tensor, _PREFIXES.index(name))
      return result

    type_change = tf.not_equal(prev_kind, kind)
    end = (p_is(prev_prefix, "E", "S", "[", "]")
           | (p_is(prev_prefix, "B", "I") & p_is(prefix, "B", "S", "O"))
           | (~p_is(prev_prefix, "O", ".") & type_change))
    start = (p_is(prefix, "B", "S", "[", "]")
             | (p_is(prev_prefix, "E", "S", "O") & p_is(prefix, "E", "I"))
             | (~p_is(prefix, "O", ".") & type_change))
    # Inside a chunk: the last event (a start, else an end) at or before the word was a start.
    index = tf.range(tf.shape(label, out_type=tf.int64)[0])
    event = start | end | first
    last = _running_max(tf.where(event, index, tf.constant(-1, tf.int64)))
    inside = tf.gather(start, tf.maximum(last, 0)) & (last >= 0)
    chunk = tf.cumsum(tf.cast(start, tf.int64)) - 1
    # A chunk's words: consecutive inside words with the same chunk number.
    chunk_start = start & inside
    next_inside = tf.concat([inside[1:], [False]], axis=0)
    next_chunk = tf.concat([chunk[1:], [-1]], axis=0)
    next_first = tf.concat([first[1:], [True]], axis=0)
    chunk_last = inside & ~(next_inside & tf.equal(next_chunk, chunk) & ~next_first)
    starts = tf.where(chunk_start)[:, 0]
    lasts = tf.where(chunk_last)[:, 0]
    row = tf.gather(words.value_rowids(), starts)
    begin = tf.gather(word_start.flat_values, starts)
    finish = tf.gather(word_end.flat_values, lasts)
    num_rows = words.nrows()
    entity_type = tf.gather(self._type_names, tf.gather(kind, starts))
    entity_text = tf.strings.substr(tf.gather(text, row), begin, finish - begin,
                                    unit="UTF8_CHAR")

    def dense(values, fill):
      return tf.RaggedTensor.from_value_rowids(values, row, nrows=num_rows).to_tensor(fill)

    counts = tf.math.bincount(tf.cast(row, tf.int32), minlength=tf.cast(num_rows, tf.int32),
                              maxlength=tf.cast(num_rows, tf.int32))
    return dict(entity_type=dense(entity_type, ""), entity_text=dense(entity_text, ""),
                entity_start=dense(begin, -1), entity_end=dense(finish, -1),
                num_entities=tf.cast(counts, tf.int32))

def _running_max(values: tf.Tensor) -> tf.Tensor:
  """The running maximum of a 1-D int64 tensor holding -1 or each element's own index (so the
  maximum so far is the latest index seen): found through the count of indexes seen so far."""
  seen = tf.cumsum(tf.cast(values >= 0, tf.int64))  # events up to here
  event_index = tf.boolean_mask(values, values >= 0)
  padded = tf.concat([[-1], event_index], axis=0)
  return tf.gather(padded, seen)


def export_tagger_model(model: keras.Model, config: BertConfig, vocab_file: str, export_dir: str,
                        labels: Sequence[str], *, do_lower_case: bool, seq_length: int,
                        version: Optional[int] = None, model_name: str = "ner",
                        task_info: Optional[Mapping[str, Any]] = None,
                        warmup: bool = True, length_buckets: Optional[str] = "auto") -> str:
  """Writes a raw-text tagger SavedModel in TF Serving's layout.

  Size: twelve parameters, the export's settings as run_ner's flags give them, one each.

  Args:
    model: the trained tagger (head.build_tagger_model) in float32, built outside any
      distribution strategy.
    config: its BertConfig.
    vocab_file: the vocab it was fine-tuned with (an asset of the export).
    export_dir: the model base directory; the version goes to <export_dir>/<model_name>/<v>/.
    labels: the tags in label id order.
    do_lower_case, seq_length: run_ner's --do_lower_case and --max_seq_length.
    version: default one more than the largest already there.
    model_name: the directory name under export_dir.
    task_info: written as assets/task_info.json.
    warmup: write TF Serving warm-up requests.
    length_buckets: --length_buckets: windows run cut to the longest one rounded up to a
      bucket (saved_model.export_serving_models).

  Returns:
    The version directory written.
  """
  inputs = dict(text=np.array([t.encode("utf-8") for t in WARMUP_TEXTS], object))
  return tf_serving.export_task_module(
      lambda packer: TaggerModule(packer, model, seq_length, labels), config, vocab_file,
      export_dir, do_lower_case=do_lower_case, seq_length=seq_length, version=version,
      model_name=model_name, info=dict(kind="tagger", labels=list(labels)),
      task_info=task_info, warmup_inputs=lambda name: inputs, warmup=warmup,
      length_buckets=length_buckets)
