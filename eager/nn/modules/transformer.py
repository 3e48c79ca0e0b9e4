"""MultiheadAttention and the Transformer family as in torch.nn: PyTorch's constructor
signatures, parameter names (in_proj_weight, in_proj_bias, out_proj.weight, ...), shapes,
initialisation, mask rules and error words.

Written in eager ops, so autograd and compile() need nothing new. PyTorch's fused fast paths
(inference only, same results) are not reproduced: every call takes the path PyTorch takes
in training. `is_causal` is a hint, as in PyTorch: where a mask is given it is used as
given, so a hint on a mask that is not causal changes nothing here."""
from __future__ import annotations

import copy
import math
import warnings

from eager import factories
from eager.functional import bmm, cat, softmax, where
from eager.nn import functional as F
from eager.nn import init
from eager.nn.modules.container import ModuleList
from eager.nn.modules.layers import Dropout, LayerNorm, Linear
from eager.nn.modules.module import Module
from eager.nn.parameter import Parameter
from ir import dtypes


def _canonical_mask(mask, name: str, dtype):
    """A bool mask (True: may not attend) as an additive float mask; a float mask as given."""
    if mask is None:
        return None
    if mask.dtype is not dtypes.bool_ and not mask.is_floating_point():
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if mask.is_floating_point():
        return mask
    return where(mask, -math.inf, factories.zeros(tuple(mask.shape), dtype=dtype,
                                                   device=mask.device))


def _pad_key(mask):
    """One more key position that every query may see (add_bias_kv, add_zero_attn)."""
    if mask is None:
        return None
    zeros = factories.zeros(tuple(mask.shape[:-1]) + (1,), dtype=mask.dtype, device=mask.device)
    return cat([mask, zeros], -1)


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """PyTorch's _mha_shape_check: whether the call is batched, or its AssertionError."""
    if query.dim() not in (2, 3):
        raise AssertionError("query should be unbatched 2D or batched 3D tensor but received "
                             f"{query.dim()}-D query tensor")
    batched = query.dim() == 3
    kind, want = ("batched (3-D)", 3) if batched else ("unbatched (2-D)", 2)
    if key.dim() != want or value.dim() != want:
        raise AssertionError(f"For {kind} `query`, expected `key` and `value` to be {want}-D but "
                             f"found {key.dim()}-D and {value.dim()}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.dim() != want - 1:
        raise AssertionError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or "
                             f"{want - 1}-D but found {key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 3):
            raise AssertionError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or "
                                 f"3-D but found {attn_mask.dim()}-D tensor instead")
        expected = (num_heads, query.shape[0], key.shape[0])
        if not batched and attn_mask.dim() == 3 and tuple(attn_mask.shape) != expected:
            raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                 f"{attn_mask.shape}")
    return batched


class MultiheadAttention(Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")

        def empty(*shape):
            return Parameter(factories.empty(*shape, dtype=dtype, device=device))
        if self._qkv_same_embed_dim:
            self.in_proj_weight = empty(3 * embed_dim, embed_dim)
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = empty(embed_dim, embed_dim)
            self.k_proj_weight = empty(embed_dim, self.kdim)
            self.v_proj_weight = empty(embed_dim, self.vdim)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = empty(3 * embed_dim)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k, self.bias_v = empty(1, 1, embed_dim), empty(1, 1, embed_dim)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight,
                  self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def _projections(self, query, key, value):
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
            if tuple(key.shape[:2]) != tuple(value.shape[:2]):
                raise AssertionError(f"key's sequence and batch dims {key.shape[:2]} do not "
                                     f"match value's {value.shape[:2]}")
        b_q = b_k = b_v = None
        if self.in_proj_bias is not None:
            b_q, b_k, b_v = self.in_proj_bias.chunk(3)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = _check_shapes(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        if self.batch_first and batched:
            query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        output, weights = self._attend(query, key, value, key_padding_mask, need_weights,
                                       attn_mask, average_attn_weights, is_causal)
        if not batched:
            output = output.squeeze(1)
            weights = weights.squeeze(0) if weights is not None else None
        elif self.batch_first:
            output = output.transpose(1, 0)
        return output, weights

    def _attend(self, query, key, value, key_padding_mask, need_weights, attn_mask,
                average_attn_weights, is_causal):
        """PyTorch's multi_head_attention_forward on (L, N, E) query and (S, N, E) key/value."""
        tgt_len, batch, embed_dim = query.shape
        if key_padding_mask is not None and attn_mask is not None and \
                key_padding_mask.dtype != attn_mask.dtype:
            warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. "
                          "Use same type for both instead.", stacklevel=4)
        key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", query.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                               "Transformer module method `generate_square_subsequent_mask` to "
                               "create this mask.")
        attn_mask = _canonical_mask(attn_mask, "attn_mask", query.dtype)
        if embed_dim != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but "
                                 f"got {embed_dim}")
        if self._qkv_same_embed_dim and tuple(key.shape) != tuple(value.shape):
            raise AssertionError(f"key shape {key.shape} does not match value shape "
                                 f"{value.shape}")
        q, k, v = self._projections(query, key, value)
        src_len = k.shape[0]
        if attn_mask is not None:
            want = (tgt_len, src_len) if attn_mask.dim() == 2 else \
                (batch * self.num_heads, tgt_len, src_len)
            if tuple(attn_mask.shape) != want:
                raise RuntimeError(f"The shape of the {attn_mask.dim()}D attn_mask is "
                                   f"{attn_mask.shape}, but should be {want}.")
            if attn_mask.dim() == 2:
                attn_mask = attn_mask.unsqueeze(0)
        if self.bias_k is not None:
            k = cat([k, self.bias_k.expand(1, batch, embed_dim)])
            v = cat([v, self.bias_v.expand(1, batch, embed_dim)])
            attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
        heads, head_dim = self.num_heads, self.head_dim
        q = q.reshape(tgt_len, batch * heads, head_dim).transpose(0, 1)
        k = k.reshape(k.shape[0], batch * heads, head_dim).transpose(0, 1)
        v = v.reshape(v.shape[0], batch * heads, head_dim).transpose(0, 1)
        if self.add_zero_attn:
            zeros = factories.zeros(batch * heads, 1, head_dim, dtype=k.dtype, device=k.device)
            k, v = cat([k, zeros], 1), cat([v, zeros], 1)
            attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
        src_len = k.shape[1]
        if key_padding_mask is not None:
            if key_padding_mask.shape[0] != batch:
                raise AssertionError(f"Expected key_padded_mask.shape[0] to be {batch}, but got "
                                     f"{key_padding_mask.shape[0]}")
            if key_padding_mask.shape[1] != src_len:
                raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but "
                                     f"got {key_padding_mask.shape[1]}")
            padding = key_padding_mask.reshape(batch, 1, 1, src_len) \
                .expand(batch, heads, 1, src_len).reshape(batch * heads, 1, src_len)
            attn_mask = padding if attn_mask is None else attn_mask + padding
        scores = bmm(q * math.sqrt(1.0 / head_dim), k.transpose(-2, -1))
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = softmax(scores, -1)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, self.dropout)
        output = bmm(weights, v).transpose(0, 1).reshape(tgt_len * batch, embed_dim)
        output = self.out_proj(output).reshape(tgt_len, batch, embed_dim)
        if not need_weights:
            return output, None
        weights = weights.reshape(batch, heads, tgt_len, src_len)
        return output, (weights.mean(dim=1) if average_attn_weights else weights)


def _activation(activation):
    if not isinstance(activation, str):
        return activation
    if activation in ("relu", "gelu"):
        return getattr(F, activation)
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _FeedForward(Module):
    """The parts every layer shares: linear1, dropout, linear2, the activation."""

    def _init_feed_forward(self, d_model, dim_feedforward, dropout, activation, norm_first,
                           bias, device, dtype):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)
        self.norm_first = norm_first
        self.activation = _activation(activation)
        self.activation_relu_or_gelu = {F.relu: 1, F.gelu: 2}.get(self.activation, 0)

    def _ff_block(self, x, dropout):
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_FeedForward):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self._init_feed_forward(d_model, dim_feedforward, dropout, activation, norm_first,
                                bias, device, dtype)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x, self.dropout2))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)


class TransformerDecoderLayer(_FeedForward):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias, **kw)
        self._init_feed_forward(d_model, dim_feedforward, dropout, activation, norm_first,
                                bias, device, dtype)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.dropout3 = Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                           memory_is_causal))
        return self.norm3(x + self._ff_block(x, self.dropout3))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)


def _clones(layer, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = False  # kiln has no nested tensors: padding stays padding
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, is_causal=bool(is_causal),
                           src_key_padding_mask=src_key_padding_mask)
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(Module):
    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        output = tgt
        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=memory_key_padding_mask,
                           tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return output if self.norm is None else self.norm(output)


class Transformer(Module):
    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation=F.relu, custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **kw), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **kw), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch_dim = 0 if self.batch_first else 1
        if src.dim() == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """-inf above the diagonal, 0 on and below: position i sees positions up to i."""
        return factories.full((sz, sz), -math.inf, dtype=dtype, device=device).triu(1)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
