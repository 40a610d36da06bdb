"""Instructor-only exports of the grader: nbgrader's gradebook and feedback (`nbgrader`), and a
Gradescope autograder zip (`gradescope`). Neither ships to students."""
