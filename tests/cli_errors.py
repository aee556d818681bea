"""The CLI's error contract as a test assertion: shared by the end-to-end tests that
run build/multiscreen (tests/cli/, tests/data/)."""
import unittest


class OneLineErrors(unittest.TestCase):
    """A TestCase base with assert_one_line_error."""

    def assert_one_line_error(self, result, *fragments):
        """`result` (a subprocess.CompletedProcess, text or bytes) failed with exactly one
        non-blank line on stderr, and that line holds every fragment."""
        self.assertNotEqual(result.returncode, 0, result.stdout)
        stderr = result.stderr.decode() if isinstance(result.stderr, bytes) else result.stderr
        lines = [l for l in stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, stderr)
        for f in fragments:
            self.assertIn(f, lines[0])
