from shared_protocol.fixedpoint import Affine
from shared_protocol.mechanism import Column, RecordMechanism
from shared_protocol.distance import distance_difference
from shared_protocol.noise import DiscreteLaplace
from shared_protocol.rng import XorShift32
from tests.portable.util import raises


def _cols():
    ident = Affine(1, 1, 0, -5000, 5000)
    return [Column(ident, 125, (1, 10)), Column(ident, 250, (1, 5))]


def test_noise_is_the_column_sampler_in_column_order():
    m = RecordMechanism(_cols(), [0, 0], XorShift32(4))
    q, out, d = m.perturb([42, -7])
    assert q == [42, -7]
    # Same draws, by hand: column 0 at scale 1250, column 1 at scale 1250 (250 / 0.2).
    rng = XorShift32(4)
    a = DiscreteLaplace(1250, 1, rng)
    b = DiscreteLaplace(1250, 1, rng)
    assert out == [42 + a.sample(), -7 + b.sample()]
    assert d == distance_difference(q, out, [0, 0])


def test_scaling_is_applied_before_noise_and_clamps():
    col = Column(Affine(3300, 65535, 0, 0, 65535), 100, (1, 1))
    m = RecordMechanism([col], [1650], XorShift32(2))
    q, out, d = m.perturb([70000])
    assert q == [3300]


def test_epsilon_per_row_and_for_outliers():
    m = RecordMechanism(_cols(), [0, 0], XorShift32(1))
    assert m.epsilon_row() == (3, 10)            # 1/10 + 1/5
    # domain span 10000 quanta: 0.1 * 10000/125 = 8 and 0.2 * 10000/250 = 8
    assert m.columns[0].eps_worst() == (8, 1)
    assert m.epsilon_row_worst() == (16, 1)


def test_relaxed_sensitivity_wider_than_domain_gives_no_weaker_level():
    col = Column(Affine(1, 1, 0, 0, 10), 100, (1, 2))
    assert col.eps_worst() == (1, 2)


def test_validation():
    ident = Affine(1, 1, 0, 0, 10)
    for delta, eps in ((0, (1, 1)), (1.5, (1, 1)), (1, (0, 1)), (1, (1, 0)), (1, [1, 1]), (1, (0.1, 1))):
        raises(ValueError, Column, ident, delta, eps)
    raises(ValueError, RecordMechanism, [], [], XorShift32(1))
    raises(ValueError, RecordMechanism, _cols(), [0], XorShift32(1))
    raises(ValueError, RecordMechanism, _cols(), [0, 0.5], XorShift32(1))
    m = RecordMechanism(_cols(), [0, 0], XorShift32(1))
    raises(ValueError, m.perturb, [1])


def test_eps_cs_noises_d_diff_and_is_charged():
    m = RecordMechanism(_cols(), [0, 0], XorShift32(4), eps_cs=(1, 2))
    # rho = sqrt(125^2 + 250^2) / 2; isqrt(4 rho^2) = 279: 279 + 1 + 281 // 2 = 420
    assert m.cs_delta == 420
    assert m.epsilon_charge() == (4, 5)            # 3/10 + 1/2
    rng = XorShift32(4)
    a = DiscreteLaplace(1250, 1, rng)
    b = DiscreteLaplace(1250, 1, rng)
    cs = DiscreteLaplace(840, 1, rng)              # 420 / (1/2)
    q, out, d = m.perturb([42, -7])
    assert out == [42 + a.sample(), -7 + b.sample()]
    assert d == distance_difference(q, out, [0, 0]) + cs.sample()
    assert RecordMechanism(_cols(), [0, 0], XorShift32(4)).epsilon_charge() == (3, 10)
    assert raises(ValueError, RecordMechanism, _cols(), [0, 0], XorShift32(4), (0, 1))


def test_cs_delta_bounds_the_d_diff_change_within_the_normal_ball():
    # Same column noise, two readings within rho of the centre: d_diff moves by at most cs_delta.
    m = RecordMechanism(_cols(), [0, 0], XorShift32(1), eps_cs=(1, 1))
    rng = XorShift32(9)
    rho2 = (125 * 125 + 250 * 250) // 4

    def point():
        while True:
            x = [rng.getrandbits(9) - 256, rng.getrandbits(9) - 256]
            if x[0] * x[0] + x[1] * x[1] <= rho2:
                return x
    worst = 0
    for _ in range(2000):
        x, z = point(), point()
        y = [rng.getrandbits(12) - 2048, rng.getrandbits(12) - 2048]
        dx = distance_difference(x, [x[0] + y[0], x[1] + y[1]], [0, 0])
        dz = distance_difference(z, [z[0] + y[0], z[1] + y[1]], [0, 0])
        worst = max(worst, abs(dx - dz))
    assert worst <= m.cs_delta
