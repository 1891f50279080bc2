"""plots.py rok: the labels never cover each other and stay inside the axes; a plan file's points over its
memory budget are drawn and labelled as such. Run with /usr/bin/python3 (Debian's python3-matplotlib)."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import plots  # noqa: E402

MiB = 2**20


def report(policy, kind, step_ms, activation_MiB):
    return {"format": "ssdtrain-report", "kind": kind, "policy": policy, "step_time_ns": int(step_ms * 1e6),
            "peak_activation_bytes": int(activation_MiB * MiB)}


def rok_point(policy, step_ms, activation_MiB, over_MiB):
    return {"policy": policy, "step_time_ns": int(step_ms * 1e6), "peak_activation_bytes": int(activation_MiB * MiB),
            "peak_gpu_bytes": 0, "fits": over_MiB == 0, "over_budget_bytes": int(over_MiB * MiB)}


class RokPlot(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, doc):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def assert_labels_apart(self, fig, ax, annotations):
        renderer = fig.canvas.get_renderer()
        inside = ax.get_window_extent(renderer)
        boxes = [plots.text_box(a, renderer) for a in annotations]
        for i, a in enumerate(boxes):
            self.assertTrue(inside.x0 <= a.x0 and a.x1 <= inside.x1 and inside.y0 <= a.y0 and a.y1 <= inside.y1,
                            annotations[i].get_text())
            for j in range(i):
                self.assertFalse(a.overlaps(boxes[j]), (annotations[i].get_text(), annotations[j].get_text()))

    # The demo's points on tiny-gpt: a prediction and a run 13 ms apart at one memory (keep), two predictions
    # at the same place (ssdtrain, optimal), and one at the right edge: each label found a free place.
    def test_labels_of_close_and_coincident_points_do_not_overlap(self):
        points = [("keep", 522.4, 509.2, 112.25), ("recompute-full", 687.6, 803.7, 28.5),
                  ("ssdtrain", 522.4, 579.0, 16.25), ("optimal", 522.4, 622.3, 15.75)]
        paths = []
        for policy, predicted, measured, mib in points:
            paths.append(self.write(f"p-{policy}.json", report(policy, "prediction", predicted, mib)))
            paths.append(self.write(f"m-{policy}.json", report(policy, "run", measured, mib)))
        fig, ax, annotations = plots.draw_rok(paths)
        self.addCleanup(plots.plt.close, fig)
        self.assertEqual(len(annotations), 8)
        self.assert_labels_apart(fig, ax, annotations)

    # A plan file's curve: four points at one place, two of them over the budget, whose labels say by how much;
    # a policy the planner did not simulate there has no point.
    def test_plan_curve_marks_the_points_over_the_budget(self):
        plan = {"format": "ssdtrain-plan", "extra": {"rok": [
            rok_point("keep", 2397, 224.5, 195.3), rok_point("offload-host", 2397, 224.5, 195.3),
            rok_point("offload-ssd", 2397, 32.0, 3.3), rok_point("ssdtrain", 2397, 32.0, 3.3),
            rok_point("optimal", 2404.7, 31.5, 0),
            {"policy": "megatron-offload", "simulated": False, "why": "offload-host does not fit"}]}}
        fig, ax, annotations = plots.draw_rok([self.write("plan.json", plan)])
        self.addCleanup(plots.plt.close, fig)
        texts = [a.get_text() for a in annotations]
        self.assertEqual(len(texts), 5)  # megatron-offload, not simulated, has no point
        self.assertIn("keep (plan)\n195.3 MiB over budget", texts)
        self.assertIn("ssdtrain (plan)\n3.3 MiB over budget", texts)
        self.assertIn("optimal (plan)", texts)
        over = [a for a in annotations if "over budget" in a.get_text()]
        self.assertTrue(all(a.get_color() == plots.OVER_BUDGET_COLOR for a in over))
        self.assert_labels_apart(fig, ax, annotations)

    # `plan --compare --json`: one point per simulated policy (each at its own best layout); a policy whose
    # weights alone are over the budget has no point; one over the budget is labelled so.
    def test_policy_comparison_is_one_point_per_simulated_policy(self):
        def row(policy, step_ms, activation_MiB, over_MiB):
            return dict(rok_point(policy, step_ms, activation_MiB, over_MiB), simulated=True)
        comparison = {"format": "ssdtrain-policy-comparison", "global_batch": 8, "policies": [
            row("keep", 1241.6, 90.0, 20.0), row("recompute-full", 1648.2, 20.0, 0),
            row("offload-ssd", 1206.2, 30.0, 0), {"policy": "optimal", "simulated": False, "fits": False}]}
        fig, ax, annotations = plots.draw_rok([self.write("compare.json", comparison)])
        self.addCleanup(plots.plt.close, fig)
        texts = sorted(a.get_text() for a in annotations)
        self.assertEqual(texts, ["keep (compare)\n20.0 MiB over budget", "offload-ssd (compare)",
                                 "recompute-full (compare)"])
        self.assert_labels_apart(fig, ax, annotations)


if __name__ == "__main__":
    unittest.main()
