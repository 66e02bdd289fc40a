"""Lesson 15, the capstone: train the digits CNN on 4 workers to a target accuracy under a
byte budget and a step budget, with everything the course built — measured by a meter."""
