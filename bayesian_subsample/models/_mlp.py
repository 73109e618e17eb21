"""Multi-layer perceptrons as per-observation models (no GLM structure).

A network is a :class:`MLP` (architecture only) bound to data by
:class:`MLPModel`, which implements the row-model protocol of the likelihood
layer (:class:`bayesian_subsample.likelihood.RowModel`): for an index array
of rows it returns the sum of the per-observation log likelihoods and of
their gradients with respect to the flat weight vector, or the
per-observation values.  Nothing here knows about sampling.

Layout of the flat weight vector ``theta`` (float64, length :attr:`MLP.dim`):
layer ``l = 0, ..., L-1`` contributes its weight matrix ``W_l`` of shape
``(fan_in_l, fan_out_l)`` in row-major order followed by its bias ``b_l``
(``fan_out_l``).  Hidden layers apply ``activation`` ("relu", "tanh",
"logistic" or "identity", as scikit-learn's ``MLPClassifier``); the output
layer is

* ``"softmax"``: K >= 2 logits, ``log p(y=k|x) = z_k - logsumexp(z)``;
* ``"sigmoid"``: one logit for two classes, ``log p(y=1|x) = -log(1+e^-z)``;
* ``"gaussian"``: ``k_out`` means ``f`` with noise precision ``tau``,
  ``log p(y|x) = sum_j [log(tau / 2 pi) / 2 - tau (y_j - f_j)^2 / 2]``.

Forward and backward passes are vectorised over the rows of a minibatch
(one loop over layers).  The matrix products run in the dtype of ``X``
(float32 stays float32, which halves memory traffic and doubles BLAS
throughput); log likelihoods are summed and gradients returned in float64.

This is the network of Chen, Fox and Guestrin (2014, §4.2: one hidden layer
of 100 sigmoid units, softmax output) and of Pakman et al. (2017, §7.3).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_softmax

from ._rowmodel import ChunkedRowModel

__all__ = ["MLP", "MLPModel", "ACTIVATIONS", "OUTPUTS"]

ACTIVATIONS = ("identity", "logistic", "tanh", "relu")
OUTPUTS = ("softmax", "sigmoid", "gaussian")
_LOG_2PI = float(np.log(2.0 * np.pi))


def _activate(name, z):
    if name == "identity":
        return z
    if name == "logistic":
        return expit(z)
    if name == "tanh":
        return np.tanh(z)
    return np.maximum(z, 0)


def _activation_slope(name, a):
    """Derivative of the activation, written in terms of its output ``a``."""
    if name == "identity":
        return np.ones_like(a)
    if name == "logistic":
        return a * (1 - a)
    if name == "tanh":
        return 1 - a * a
    return (a > 0).astype(a.dtype)


class MLP:
    """Architecture of a fully connected network and its flat weight layout.

    Parameters
    ----------
    n_features : int
    hidden_layer_sizes : tuple of int
        Units per hidden layer (empty: a linear model).
    n_outputs : int
        Output units (K for softmax, 1 for sigmoid, ``k_out`` for gaussian).
    activation : {"identity", "logistic", "tanh", "relu"}
    output : {"softmax", "sigmoid", "gaussian"}
    """

    def __init__(self, n_features, hidden_layer_sizes, n_outputs, activation="logistic",
                 output="softmax"):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}.")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}.")
        self.n_features = int(n_features)
        self.hidden_layer_sizes = tuple(int(h) for h in hidden_layer_sizes)
        self.n_outputs = int(n_outputs)
        self.activation = activation
        self.output = output
        sizes = (self.n_features,) + self.hidden_layer_sizes + (self.n_outputs,)
        self.layer_shapes = list(zip(sizes[:-1], sizes[1:]))
        #: (weights slice, bias slice) of each layer in the flat vector.
        self.slices = []
        start = 0
        for fan_in, fan_out in self.layer_shapes:
            w = slice(start, start + fan_in * fan_out)
            b = slice(w.stop, w.stop + fan_out)
            self.slices.append((w, b))
            start = b.stop
        self.dim = start

    @property
    def n_layers(self):
        return len(self.layer_shapes)

    def layer_of_each_weight(self):
        """Integer array (dim,): the layer each entry of ``theta`` belongs to."""
        out = np.empty(self.dim, dtype=np.intp)
        for layer, (w, b) in enumerate(self.slices):
            out[w.start:b.stop] = layer
        return out

    def unpack(self, theta, dtype=None):
        """List of ``(W_l, b_l)`` views (copies when ``dtype`` differs)."""
        layers = []
        for (fan_in, fan_out), (w, b) in zip(self.layer_shapes, self.slices):
            W = theta[w].reshape(fan_in, fan_out)
            bias = theta[b]
            if dtype is not None:
                W, bias = W.astype(dtype, copy=False), bias.astype(dtype, copy=False)
            layers.append((W, bias))
        return layers

    def glorot_init(self, rng):
        """Weights and biases uniform on ``+-sqrt(f / (fan_in + fan_out))``.

        ``f = 2`` for the logistic activation and 6 otherwise, the
        initialisation of Glorot and Bengio (2010) as scikit-learn uses it.
        """
        theta = np.empty(self.dim)
        factor = 2.0 if self.activation == "logistic" else 6.0
        for (fan_in, fan_out), (w, b) in zip(self.layer_shapes, self.slices):
            bound = np.sqrt(factor / (fan_in + fan_out))
            theta[w.start:b.stop] = rng.uniform(-bound, bound, b.stop - w.start)
        return theta

    # ----------------------------------------------------------- passes
    def _dtype(self, X):
        return X.dtype if X.dtype in (np.float32, np.float64) else np.float64

    def forward(self, theta, X, layers=None):
        """Activations of every layer (input first) and the output pre-activation.

        ``layers`` is ``unpack(theta, X.dtype)`` if the caller has it (the
        backward pass reuses the same cast weights: one cast per minibatch).
        """
        dt = self._dtype(X)
        acts = [np.asarray(X, dtype=dt)]
        if layers is None:
            layers = self.unpack(theta, dt)
        a = acts[0]
        for layer, (W, b) in enumerate(layers):
            z = a @ W
            z += b
            if layer < len(layers) - 1:
                a = _activate(self.activation, z)
                acts.append(a)
        return acts, z

    def output_loglik(self, z, y, noise_precision=1.0):
        """Per-row log likelihood (float64) and its gradient with respect to ``z``."""
        if self.output == "softmax":
            logp = log_softmax(z, axis=1)
            rows = np.arange(len(y))
            ll = logp[rows, y].astype(np.float64)
            dz = -np.exp(logp)
            dz[rows, y] += 1
        elif self.output == "sigmoid":
            zz = z[:, 0]
            ll = (y * zz - np.logaddexp(0, zz)).astype(np.float64)
            dz = (y - expit(zz)).astype(z.dtype)[:, None]
        else:
            tau = float(noise_precision)
            r = y.reshape(z.shape) - z
            ll = (0.5 * z.shape[1] * (np.log(tau) - _LOG_2PI)
                  - 0.5 * tau * np.einsum("ij,ij->i", r, r, dtype=np.float64))
            dz = (tau * r).astype(z.dtype, copy=False)
        return ll, dz

    def loglik_rows(self, theta, X, y, noise_precision=1.0):
        """Per-row log likelihoods, shape (n,), float64."""
        _, z = self.forward(theta, X)
        return self.output_loglik(z, y, noise_precision)[0]

    def loglik_and_grad(self, theta, X, y, noise_precision=1.0):
        """``sum_i log p(y_i|x_i, theta)`` and its gradient (float64, shape (dim,))."""
        layers = self.unpack(theta, self._dtype(X))
        acts, z = self.forward(theta, X, layers)
        ll, delta = self.output_loglik(z, y, noise_precision)
        return float(ll.sum()), self.backward(acts, delta, layers)

    def weighted_loglik_and_grad(self, theta, X, y, weights, noise_precision=1.0):
        """``sum_i w_i log p(y_i|x_i, theta)`` and its gradient: the output error
        of row ``i`` scaled by ``w_i`` before one backward pass (importance-
        sampled minibatches, :class:`~bayesian_subsample.likelihood.ImportanceDesign`)."""
        layers = self.unpack(theta, self._dtype(X))
        acts, z = self.forward(theta, X, layers)
        ll, delta = self.output_loglik(z, y, noise_precision)
        w = np.asarray(weights, dtype=np.float64)
        delta *= w.astype(delta.dtype)[:, None]
        return float(ll @ w), self.backward(acts, delta, layers)

    def row_gradient_square_norms(self, theta, X, y, noise_precision=1.0):
        """``|grad_i|^2`` of the per-row log-likelihood gradients (float64,
        (rows,)): a forward pass and :meth:`gradient_square_norms` (the
        back-propagation of the output errors, no weight gradient)."""
        layers = self.unpack(theta, self._dtype(X))
        acts, z = self.forward(theta, X, layers)
        _, delta = self.output_loglik(z, y, noise_precision)
        return self.gradient_square_norms(acts, delta, layers)

    def _layer_errors(self, acts, delta, layers):
        """The backward recursion: ``(l, A_l, Delta_l)`` for ``l = L-1, ..., 0``.

        ``A_l = acts[l]`` is layer ``l``'s input (rows, fan_in) and
        ``Delta_l`` (rows, fan_out) the derivative of the function whose
        output error is ``delta`` (``Delta_{L-1} = delta``) with respect to
        layer ``l``'s pre-activation ``z_l = A_l W_l + b_l``, back-propagated
        by ``Delta_{l-1} = (Delta_l W_l^T) * sigma'(z_{l-1})`` with the slope
        written in terms of ``A_l = sigma(z_{l-1})``
        (:func:`_activation_slope`).  Each ``Delta_{l-1}`` is a new array
        (``delta`` and the yielded errors are never written to), computed
        only when the next layer is asked for: the per-row gradient of
        layer ``l``'s weights is ``outer(A_l[i], Delta_l[i])`` and of its
        bias ``Delta_l[i]``, and every pass below (:meth:`backward`,
        :meth:`backward_many`, :meth:`gradient_moments`,
        :meth:`gradient_gram`, :meth:`gradient_rows`,
        :meth:`gradient_square_norms`) is a different reduction of these.
        """
        for layer in range(self.n_layers - 1, -1, -1):
            yield layer, acts[layer], delta
            if layer:
                delta = delta @ layers[layer][0].T
                delta *= _activation_slope(self.activation, acts[layer])

    def backward(self, acts, delta, layers):
        """Gradient (float64, shape (dim,)) of ``sum_i`` of a function of the
        outputs whose derivative with respect to the output pre-activation is
        ``delta`` (rows, n_outputs), given the forward pass ``acts``."""
        grad = np.empty(self.dim)
        for layer, a, delta in self._layer_errors(acts, delta, layers):
            w, b = self.slices[layer]
            fan_in, fan_out = self.layer_shapes[layer]
            # The product is written straight into the float64 gradient (one
            # cast, no intermediate ravel copy).
            grad[w].reshape(fan_in, fan_out)[...] = a.T @ delta
            grad[b] = delta.sum(axis=0, dtype=np.float64)
        return grad

    def backward_many(self, acts, delta, layers, C):
        """``J^T C`` for a (rows, k) weight matrix ``C`` (float64, (dim, k)).

        ``J`` is the (rows, dim) matrix of per-row gradients of the function
        whose output-error is ``delta`` (never formed).  Column ``j`` is
        :meth:`backward` with row ``i``'s error scaled by ``C[i, j]``; the
        back-propagated errors do not depend on ``C`` (the scaling is per
        row and the backward pass is linear), so they are computed once and
        each layer's ``k`` products are one matrix product ``A_l^T [Delta_l
        * C_1, ..., Delta_l * C_k]``: ``rows x dim x k`` multiply-adds.
        """
        C = np.asarray(C, dtype=np.float64)
        k = C.shape[1]
        dt = acts[0].dtype
        Cd = C.astype(dt, copy=False)
        out = np.empty((self.dim, k))
        for layer, a, delta in self._layer_errors(acts, delta, layers):
            w, b = self.slices[layer]
            fan_in, fan_out = self.layer_shapes[layer]
            scaled = (delta[:, None, :] * Cd[:, :, None]).reshape(len(delta), k * fan_out)
            prod = a.T @ scaled                                # (fan_in, k * fan_out)
            out[w] = prod.reshape(fan_in, k, fan_out).transpose(0, 2, 1).reshape(
                fan_in * fan_out, k)
            out[b] = np.asarray(delta.T, dtype=np.float64) @ C
        return out

    def tangent(self, direction, acts, layers):
        """Forward-mode pass: the output pre-activation's derivative along ``direction``.

        ``d/ds z(x_i; theta + s u)`` at ``s = 0`` for every row, shape
        (rows, n_outputs), given the forward pass ``acts`` at ``theta`` and
        its cast weights ``layers``.  The tangent of each layer's input is
        carried alongside it (``dz_l = a_l dW_l + db_l + da_l W_l``,
        ``da_{l+1} = sigma'(z_l) dz_l``): two matrix products per layer, about
        the cost of the forward pass, and never the (rows, dim) matrix of
        per-row gradients.
        """
        dt = acts[0].dtype
        tangents = self.unpack(np.asarray(direction, dtype=np.float64), dt)
        da = None
        for layer, ((W, _), (dW, db)) in enumerate(zip(layers, tangents)):
            dz = acts[layer] @ dW
            dz += db
            if da is not None:
                dz += da @ W
            if layer < len(layers) - 1:
                da = _activation_slope(self.activation, acts[layer + 1]) * dz
        return dz

    def output_curvature(self, z, dz, noise_precision=1.0):
        """Per-row Gauss-Newton curvature ``dz^T F(z) dz`` of ``-log p(y|z)``.

        ``F`` is the Hessian of the negative log likelihood with respect to
        the output pre-activation (it does not depend on ``y`` for these
        outputs): ``diag(p) - p p^T`` for the softmax, ``p (1 - p)`` for the
        sigmoid, ``tau I`` for the Gaussian.  Summed over rows with ``dz`` the
        tangent along ``u`` it is the generalised Gauss-Newton curvature
        ``u^T J^T F J u`` of the negative log likelihood along ``u`` (the
        positive semi-definite part of its Hessian; Schraudolph, 2002).
        """
        z = np.asarray(z, dtype=np.float64)
        dz = np.asarray(dz, dtype=np.float64)
        if self.output == "softmax":
            p = np.exp(log_softmax(z, axis=1))
            pdz = np.einsum("ij,ij->i", p, dz)
            return np.einsum("ij,ij->i", p, dz * dz) - pdz * pdz
        if self.output == "sigmoid":
            p = expit(z[:, 0])
            return p * (1.0 - p) * dz[:, 0] ** 2
        return float(noise_precision) * np.einsum("ij,ij->i", dz, dz)

    def loglik_grad_and_tangent(self, theta, X, y, noise_precision=1.0):
        """``loglik_and_grad`` plus a closure for per-row directional derivatives.

        Returns ``(ll, grad, along)`` where ``along(u)`` returns
        ``(d, curvature)``: ``d_i = u^T grad log p(y_i | x_i, theta)`` for
        every row (float64, shape (rows,)), by the forward-mode pass
        :meth:`tangent` reusing this forward pass (``d_i = delta_i^T dz_i``
        with ``delta_i`` the output error), and the summed Gauss-Newton
        curvature of the negative log likelihood along ``u``
        (:meth:`output_curvature`).  Each call of ``along`` costs about one
        forward pass (Pakman et al., 2017, eq. 10 needs the per-row ``d_i``;
        §4 notes that directional derivatives cost less than gradients).
        """
        layers = self.unpack(theta, self._dtype(X))
        acts, z = self.forward(theta, X, layers)
        ll, delta = self.output_loglik(z, y, noise_precision)
        grad = self.backward(acts, delta, layers)

        def along(direction):
            dz = self.tangent(direction, acts, layers)
            d = np.einsum("ij,ij->i", delta, dz, dtype=np.float64)
            return d, float(self.output_curvature(z, dz, noise_precision).sum())

        def gauss_newton_product(direction):
            """``sum_i J_i^T F_i J_i u``: the Gauss-Newton matrix of ``-sum log p``
            times ``u`` (a tangent pass, then the backward pass with ``F dz``)."""
            dz = np.asarray(self.tangent(direction, acts, layers), dtype=np.float64)
            if self.output == "softmax":
                p = np.exp(log_softmax(np.asarray(z, dtype=np.float64), axis=1))
                fdz = p * dz - p * np.einsum("ij,ij->i", p, dz)[:, None]
            elif self.output == "sigmoid":
                p = expit(np.asarray(z, dtype=np.float64)[:, :1])
                fdz = p * (1.0 - p) * dz
            else:
                fdz = float(noise_precision) * dz
            return self.backward(acts, fdz.astype(acts[0].dtype, copy=False), layers)

        along.gauss_newton_product = gauss_newton_product
        return float(ll.sum()), grad, along

    def gradient_moments(self, theta, X, y, noise_precision=1.0):
        """Sums over rows of the per-row gradients and of their squares.

        Returns ``(s1, s2)``, float64 arrays of shape (dim,):
        ``s1 = sum_i grad_i`` and ``s2 = sum_i grad_i ** 2`` (elementwise),
        with ``grad_i`` the gradient of ``log p(y_i | x_i, theta)``.  The
        per-row gradient of a weight is an outer product of the layer's input
        and its back-propagated error, ``a_i delta_i^T``, so its square sums
        to ``(a^2)^T (delta^2)``: one extra pair of matrix products per
        layer, never the (rows, dim) matrix of per-row gradients.  With
        ``n`` rows, ``s2 / n - (s1 / n) ** 2`` is the per-coordinate
        variance of the per-row gradients, the diagonal of the minibatch
        gradient-noise covariance (Chen, Fox and Guestrin, 2014, eq. 5:
        ``V(theta)``; with the ``n^2 / m`` scaling of a minibatch of ``m``).
        """
        layers = self.unpack(theta, self._dtype(X))
        acts, z = self.forward(theta, X, layers)
        _, delta = self.output_loglik(z, y, noise_precision)
        s1, s2 = np.empty(self.dim), np.empty(self.dim)
        for layer, a, delta in self._layer_errors(acts, delta, layers):
            w, b = self.slices[layer]
            fan_in, fan_out = self.layer_shapes[layer]
            s1[w].reshape(fan_in, fan_out)[...] = a.T @ delta
            s2[w].reshape(fan_in, fan_out)[...] = (a * a).T @ (delta * delta)
            s1[b] = delta.sum(axis=0, dtype=np.float64)
            s2[b] = np.einsum("ij,ij->j", delta, delta, dtype=np.float64)
        return s1, s2

    def gradient_gram(self, acts, delta, layers):
        """Gram matrix ``G_ij = grad_i^T grad_j`` of the per-row gradients (float64, (rows, rows)).

        ``grad_i`` is the gradient of the function whose derivative with
        respect to row ``i``'s output pre-activation is ``delta[i]`` (the
        log likelihood when ``delta`` is the output error), given the
        forward pass ``acts`` and its cast weights ``layers``.  A layer's
        per-row gradient is the outer product ``a_i delta_i^T`` (weights)
        and ``delta_i`` (bias), so its contribution to the Gram matrix is
        ``(Delta_l Delta_l^T) * (A_l A_l^T + 1)`` (elementwise): two
        (rows, rows) products per layer, never the (rows, dim) per-row
        gradients.  The input layer's ``X X^T`` dominates (``rows^2
        n_features``).
        """
        m = delta.shape[0]
        gram = np.zeros((m, m))
        for _, a, delta in self._layer_errors(acts, delta, layers):
            inner = np.asarray(a @ a.T, dtype=np.float64)
            inner += 1.0
            inner *= np.asarray(delta @ delta.T, dtype=np.float64)
            gram += inner
        return gram

    def gradient_rows(self, acts, delta, layers):
        """``J``, the (rows, dim) matrix of per-row gradients, in the passes'
        precision: row ``i`` of each layer's block is ``outer(A_l[i],
        Delta_l[i])`` (weights, in :meth:`unpack`'s order) and ``Delta_l[i]``
        (biases), one broadcast product per layer.  ``rows x dim`` memory:
        for when ``dim`` is at most the rows (then ``J^T J``, dim x dim, is
        the cheaper matrix to decompose than :meth:`gradient_gram`)."""
        m = delta.shape[0]
        out = np.empty((m, self.dim), dtype=acts[0].dtype)
        for layer, a, delta in self._layer_errors(acts, delta, layers):
            w, b = self.slices[layer]
            out[:, w] = (a[:, :, None] * delta[:, None, :]).reshape(m, -1)
            out[:, b] = delta
        return out

    def gradient_square_norms(self, acts, delta, layers):
        """``|grad_i|^2`` of every row (float64, (rows,)): the diagonal of
        :meth:`gradient_gram`, ``sum_l |Delta_l[i]|^2 (|A_l[i]|^2 + 1)``, at
        the cost of the back-propagation of ``delta`` alone."""
        out = np.zeros(delta.shape[0])
        for _, a, delta in self._layer_errors(acts, delta, layers):
            d2 = np.einsum("ij,ij->i", delta, delta, dtype=np.float64)
            out += d2 * (np.einsum("ij,ij->i", a, a, dtype=np.float64) + 1.0)
        return out

    def loglik_grad_and_rows(self, theta, X, y, noise_precision=1.0, with_grad=True):
        """``loglik_and_grad`` plus linear maps of the per-row gradients.

        Returns ``(ll, grad, rows)``; ``grad`` is None if ``with_grad`` is
        False (no backward pass is made then: for callers that need only
        ``rows``, e.g. a weighted sum ``rows.transpose_apply(w)``).  With
        ``J`` the (rows, dim) matrix of per-row gradients ``grad log p(y_i |
        x_i, theta)`` (never formed), ``rows`` has

        * ``rows.apply(u)``: ``J u``, the per-row directional derivatives
          (the forward-mode pass :meth:`tangent`, about one forward pass);
        * ``rows.transpose_apply(c)``: ``J^T c``, the per-row gradients
          summed with weights ``c`` (one backward pass with the output error
          of row ``i`` scaled by ``c_i``);
        * ``rows.gram()``: ``J J^T`` (:meth:`gradient_gram`);
        * ``rows.square_norms()``: its diagonal (:meth:`gradient_square_norms`);
        * ``rows.jacobian()``: ``J`` itself (:meth:`gradient_rows`; rows x dim
          memory, for small networks);
        * ``rows.transpose_apply_many(C)``: ``J^T C`` (:meth:`backward_many`).

        These are what a minibatch estimate of the gradient-noise covariance
        needs (Chen, Fox and Guestrin, 2014, eq. 6: ``V``, and §3.2:
        ``B_hat = eps V_hat / 2``), at a cost independent of ``dim`` times
        ``rows``.
        """
        layers = self.unpack(theta, self._dtype(X))
        acts, z = self.forward(theta, X, layers)
        ll, delta = self.output_loglik(z, y, noise_precision)
        grad = self.backward(acts, delta, layers) if with_grad else None
        return float(ll.sum()), grad, _GradientRows(self, acts, delta, layers)

    def predict_output(self, theta, X):
        """Output pre-activation (logits or means), shape (n, n_outputs)."""
        return self.forward(theta, X)[1]


class _GradientRows:
    """Linear maps of the per-row gradients of a minibatch, from its forward
    activations ``acts`` and output errors ``delta`` (the ``rows`` of
    :meth:`MLP.loglik_grad_and_rows`; no per-row gradient is formed except
    by :meth:`jacobian`)."""

    def __init__(self, net, acts, delta, layers):
        self._net, self._acts, self._delta, self._layers = net, acts, delta, layers
        self.n_rows = int(delta.shape[0])
        self.dim = int(net.dim)
        #: The passes' working precision (float32 for float32 data).
        self.dtype = acts[0].dtype

    def subset(self, keep):
        """The same maps over the rows ``keep`` only (the activations and
        errors sliced: no new forward or backward pass)."""
        keep = np.asarray(keep)
        return _GradientRows(self._net, [a[keep] for a in self._acts], self._delta[keep],
                             self._layers)

    def scaled(self, s):
        """The same maps with row ``i``'s gradient multiplied by ``s[i]``."""
        s = np.asarray(s, dtype=np.float64).astype(self.dtype)
        return _GradientRows(self._net, self._acts, self._delta * s[:, None], self._layers)

    def apply(self, u):
        dz = self._net.tangent(u, self._acts, self._layers)
        return np.einsum("ij,ij->i", self._delta, dz, dtype=np.float64)

    def transpose_apply(self, c):
        scaled = self._delta * np.asarray(c, dtype=self.dtype)[:, None]
        return self._net.backward(self._acts, scaled, self._layers)

    def transpose_apply_many(self, C):
        return self._net.backward_many(self._acts, self._delta, self._layers, C)

    def gram(self):
        return self._net.gradient_gram(self._acts, self._delta, self._layers)

    def jacobian(self):
        return self._net.gradient_rows(self._acts, self._delta, self._layers)

    def square_norms(self):
        return self._net.gradient_square_norms(self._acts, self._delta, self._layers)


class MLPModel(ChunkedRowModel):
    """An :class:`MLP` bound to data: the row-model protocol of the likelihood layer.

    Parameters
    ----------
    network : MLP
    X : ndarray (n_obs, n_features), float32 or float64 (kept as given)
    y : ndarray (n_obs,) of class codes (softmax, sigmoid) or (n_obs,) /
        (n_obs, k_out) floats (gaussian)
    chunk_size : int
        Rows per chunk of a full pass (bounded memory).
    """

    def __init__(self, network, X, y, chunk_size=10000):
        self.network = network
        self.X = X
        if network.output == "gaussian":
            y = np.asarray(y, dtype=X.dtype if X.dtype == np.float32 else np.float64)
            self.y = y.reshape(len(y), -1)
            self.n_outputs = int(self.y.shape[1])
        else:
            self.y = np.asarray(y, dtype=np.intp)
            self.n_outputs = 1
        self.n_obs = int(X.shape[0])
        self.dim = network.dim
        self.chunk_size = int(chunk_size)
        #: Whether the likelihood has a noise precision (a Gibbs-sampled hyperparameter).
        self.has_noise_precision = network.output == "gaussian"

    def loglik_and_grad(self, theta, idx, noise_precision=1.0):
        """Sum over rows ``idx`` of the log likelihoods and of their gradients."""
        return self.network.loglik_and_grad(theta, self.X[idx], self.y[idx], noise_precision)

    def loglik_rows(self, theta, idx, noise_precision=1.0):
        """Per-observation log likelihoods of rows ``idx``."""
        return self.network.loglik_rows(theta, self.X[idx], self.y[idx], noise_precision)

    def loglik_grad_and_tangent(self, theta, idx, noise_precision=1.0):
        """:meth:`MLP.loglik_grad_and_tangent` on rows ``idx`` (per-row directional
        derivatives for the stochastic bouncy particle sampler)."""
        return self.network.loglik_grad_and_tangent(theta, self.X[idx], self.y[idx],
                                                    noise_precision)

    def loglik_grad_and_rows(self, theta, idx, noise_precision=1.0, with_grad=True):
        """:meth:`MLP.loglik_grad_and_rows` on rows ``idx`` (linear maps of the
        per-row gradients, for the SG-HMC gradient-noise correction; the
        gradient is None and not computed if ``with_grad`` is False)."""
        return self.network.loglik_grad_and_rows(theta, self.X[idx], self.y[idx],
                                                 noise_precision, with_grad)

    def weighted_loglik_and_grad(self, theta, idx, weights, noise_precision=1.0):
        """:meth:`MLP.weighted_loglik_and_grad` on rows ``idx`` (importance-sampled
        minibatches)."""
        return self.network.weighted_loglik_and_grad(theta, self.X[idx], self.y[idx], weights,
                                                     noise_precision)

    def gradient_square_norms(self, theta, noise_precision=1.0):
        """``|grad_i|^2`` of every row's log-likelihood gradient, shape (n_obs,),
        by chunks (:meth:`MLP.row_gradient_square_norms`)."""
        out = np.empty(self.n_obs)
        for idx in self._chunks():
            out[idx] = self.network.row_gradient_square_norms(theta, self.X[idx], self.y[idx],
                                                              noise_precision)
        return out

    def sum_squared_residuals(self, theta):
        """``sum_i ||y_i - f(x_i)||^2`` over all rows (gaussian output), by chunks."""
        ssr = 0.0
        for idx in self._chunks():
            r = self.y[idx] - self.network.predict_output(theta, self.X[idx])
            ssr += float(np.einsum("ij,ij->", r, r, dtype=np.float64))
        return ssr
