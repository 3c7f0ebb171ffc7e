"""Raw-text exports pad a request to its longest text rounded up to a length bucket
(Packer.length_buckets, modules.call_cut): the same numbers as padding to the export's length."""

import os

import numpy as np
import tensorflow as tf

from bert_tf import length_buckets
from bert_tf.packing import Packer
from bert_tf.serving import modules
from bert_tf.tasks.classifier import serving_module as classifier_serving
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
SEQ = 64
TEXTS = ["a short one.", "the second text of this request is a little longer than the first",
         ""]


def _packers():
  return (Packer(VOCAB, True, 512),
          Packer(VOCAB, True, 512, length_buckets=length_buckets.auto_buckets(SEQ)))


def test_a_request_is_padded_to_its_bucket_with_the_same_values():
  fixed, bucketed = _packers()
  for texts, width in ((TEXTS[:1], 8), (TEXTS, 16), (["word " * 20], 24), (["word " * 80], SEQ),
                       ([], 8)):
    text = tf.constant(texts, tf.string)
    lengths = tf.fill([len(texts)], SEQ)
    full = fixed.pack(fixed.tokenize(text), None, lengths, pad_to=SEQ)
    cut = bucketed.pack(bucketed.tokenize(text), None, lengths, pad_to=SEQ)
    assert full["input_word_ids"].shape == (len(texts), SEQ)
    assert cut["input_word_ids"].shape == (len(texts), width), texts
    for key, value in full.items():
      np.testing.assert_array_equal(cut[key].numpy(), value.numpy()[:, :width])
      assert not value.numpy()[:, width:].any()
  # An explicit tensor width (bert_pack_inputs(seq_length)) is honoured exactly.
  text = tf.constant(TEXTS[:1])
  exact = bucketed.pack(bucketed.tokenize(text), None, tf.constant([40]), pad_to=tf.constant(40))
  assert exact["input_word_ids"].shape == (1, 40)


def test_windows_run_cut_and_come_back_at_full_length():
  config = helpers.tiny_config(max_position_embeddings=SEQ)
  tf.keras.utils.set_random_seed(2)
  model = squad_head.build_span_model(config)
  rng = np.random.default_rng(0)
  lengths = np.array([5, 17, 3])
  mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
  inputs = dict(input_word_ids=tf.constant(rng.integers(5, 60, (3, SEQ)) * mask, tf.int32),
                input_mask=tf.constant(mask), input_type_ids=tf.constant(np.zeros_like(mask)))
  _, bucketed = _packers()
  full = model(inputs, training=False)
  cut = modules.call_cut(model, inputs, bucketed.width, SEQ)
  for key in ("start_logits", "end_logits"):
    a, b = full[key].numpy(), cut[key].numpy()
    assert b.shape == a.shape == (3, SEQ)
    np.testing.assert_allclose(b[mask == 1], a[mask == 1], rtol=1e-5, atol=1e-5)
    # Cut at 24 (the bucket of 17): the rest is CUT_LOGIT, below every real logit.
    assert np.all(b[:, 24:] == modules.CUT_LOGIT)
    np.testing.assert_allclose(b[:, :24], a[:, :24], rtol=1e-5, atol=1e-5)
  same = modules.call_cut(model, inputs, None, SEQ)
  np.testing.assert_array_equal(same["start_logits"].numpy(), full["start_logits"].numpy())


def test_the_signatures_and_buckets_share_one_traced_model_without_dropout():
  """Every entry point of a fine-tuned export that runs the model without dropout (both
  signatures, every length bucket, __call__ with training=False on either input structure)
  calls ReusableModule.infer, so the model is traced once for them all; __call__ with
  training=True traces it once per input structure. The outputs are the model's."""
  _, bucketed = _packers()
  config = helpers.tiny_config(max_position_embeddings=SEQ,
                               vocab_size=bucketed.tokenizer.vocab_size)
  tf.keras.utils.set_random_seed(4)
  model = classifier_head.build_classifier_model(config, 2)
  traced = []
  call = model.call

  def counting_call(inputs, training=None, **kwargs):
    traced.append(bool(training))
    return call(inputs, training=training, **kwargs)
  model.call = counting_call
  module = classifier_serving.ClassifierModule(bucketed, model, SEQ, ["no", "yes"], pair=True)
  # make_reusable traces __call__ with dropout at once, once per input structure; without
  # dropout every entry point runs ReusableModule.infer, the inference graph
  # (model/inference.py), which reads the weights and never calls the Keras model.
  assert traced == [True, True]
  for function in (module.classify, module.serving_default):
    function.get_concrete_function()
  assert traced == [True, True]
  assert len(module.infer._list_all_concrete_functions()) == 1
  text, text_b = tf.constant(TEXTS), tf.constant(TEXTS[::-1])
  inputs = bucketed.pack(bucketed.tokenize(text), bucketed.tokenize(text_b),
                         tf.fill([len(TEXTS)], SEQ), pad_to=SEQ)
  expected = tf.nn.softmax(call({key: inputs[key] for key in modules.ENCODER_INPUTS},
                                training=False)["logits"]).numpy()
  np.testing.assert_allclose(module.classify(text, text_b)["probabilities"].numpy(), expected,
                             rtol=1e-5, atol=1e-6)
