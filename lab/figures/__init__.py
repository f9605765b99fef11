"""Drawing functions shared by notebooks and sliders: each draws one figure from `lab` numbers and returns them.

Taught in: every notebook with a figure.
"""
