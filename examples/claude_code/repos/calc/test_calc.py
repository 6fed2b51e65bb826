import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self) -> None:
        self.assertEqual(add(2, 3), 5)

    def test_add_negative(self) -> None:
        self.assertEqual(add(-2, -3), -5)

    def test_mul(self) -> None:
        self.assertEqual(mul(4, 5), 20)
