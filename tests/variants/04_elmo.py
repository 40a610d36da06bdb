"""Known-correct variants of chapter 04's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("scalar_mix", "AllenNLP's ScalarMix (split the weights, sum the pieces)", '''
def scalar_mix(layers, s_logits, gamma):
    normed_weights = torch.split(torch.nn.functional.softmax(s_logits, dim=0), split_size_or_sections=1)
    pieces = [weight * tensor for weight, tensor in zip(normed_weights, layers)]
    return gamma * sum(pieces)
'''),
]
