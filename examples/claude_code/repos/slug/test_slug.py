import unittest

from slug import slugify


class SlugTest(unittest.TestCase):
    def test_lowercase(self) -> None:
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_punctuation(self) -> None:
        self.assertEqual(slugify("a, b & c!"), "a-b-c")

    def test_empty(self) -> None:
        self.assertEqual(slugify(""), "")
