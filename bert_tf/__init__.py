"""bert_tf: Google's original BERT on TensorFlow 2 / Keras 3."""

__version__ = "0.1.0"
