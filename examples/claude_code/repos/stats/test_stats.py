import unittest

from stats import mean, median


class StatsTest(unittest.TestCase):
    def test_mean(self) -> None:
        self.assertEqual(mean([1, 2, 3, 6]), 3)

    def test_mean_of_nothing_raises(self) -> None:
        with self.assertRaises(ValueError):
            mean([])

    def test_median_odd(self) -> None:
        self.assertEqual(median([3, 1, 2]), 2)

    def test_median_even(self) -> None:
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
