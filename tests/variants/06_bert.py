"""Known-correct variants of chapter 06's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("BertEmbeddings", "Hugging Face's BertEmbeddings (a position_ids buffer)", '''
class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size, d_model, max_len=512, n_segments=2, dropout=0.1, eps=1e-12):
        super().__init__()
        self.token = nn.Embedding(vocab_size, d_model)
        self.segment = nn.Embedding(n_segments, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("position_ids", torch.arange(max_len).expand((1, -1)))

    def forward(self, input_ids, token_type_ids=None):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embeddings = self.token(input_ids) + self.segment(token_type_ids) + self.position(position_ids)
        return self.dropout(self.norm(embeddings))
'''),
]
