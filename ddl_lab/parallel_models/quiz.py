"""Lesson 02 (parallel models): the self-check quiz (``quiz(load_quiz("parallel_models"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question("A program is 10 % serial and 90 % perfectly parallel. By Amdahl's law, what is its speedup on 4 cores?",
             number='H0YaD1ZBURQQTF5ZAhZHXE9CSxBMEg==',
             why='N0wCBExcQgsAW1JRRkJORkdDRcLx/VVGRUABQkRZTBxMTkISEFpDWQtCVUhWXVEJWVJVEUxAT1tKV14YTIPrsgBHXEkYTA=='),
    Question("The same program (10 % serial) on as many cores as you like: the largest speedup Amdahl's law allows?",
             number='H0YaD1ZBUwoMVFANAlhFVkFDGA==',
             why='JRdMQ0wGEFVXB15Zc0oLT0+Q47JZXlpGTFJPWktUQhxMXEILEFhSDkgDEQMZFxcADQcQAA8AHQ5EBwNYAhVM'),
    Question('Two CPython threads run pure-Python arithmetic (no numpy). Their speedup over one thread is about …',
             choices=('2×', '1× (no gain)', '4×', '0.1×'),
             salt='parallel_models:3', answer='c7eae04d62587696132a6ae1fd0686547c0a5d59b26e76f36c71686891301a88',
             why='MAwJDSsoLhpMEQYKAA0LA08GDVIcDhEAHhoBSzQdGEUDD0JYWQAXGk8GAEYOBkVBWRscTQlUTwQKCBUNGw4QUQAAGhhUQhcDAxcEUxwcVVQECk8sLShMBQIUD0pZWFIwDy1MRh0HC1NZBhsAHA4dCggICUFMDgwaVBwAHEEGFkg='),
    Question('Two processes do x[0] = x[0] + 1 on a shared counter without any lock. What do you expect?',
             choices=('Exactly the right count', 'Some increments are lost', 'A crash with a segmentation fault', 'The count doubles'),
             salt='parallel_models:4', answer='b7c8e1682088d8511f9cb56641ead16ce67d75d296581f488cc7e46ade6f7aa6',
             why='JgsYRUwTB1tEVAYRRUIWBwIXRU8VC1VWDQMaDkQFAklMAw1OSFQFC0kWAEYAHgEAUk9EGkwAAQ5EDQJOHgQPX04AUhBTQgkJHAZLADhPGU8PBENLBQpMTBgOD1NDVBMdREIKFE8CF0kPDgFFTBwaBhdEG0QYCUJVThFSC0UGEAUbGwpOWQkcWEwGG0U='),
    Question('Four CPU-bound processes are started on a 2-core laptop that is otherwise idle. Do they all run in parallel?',
             choices=('Yes, processes always run in parallel', 'No: at most two run at any moment', 'Only if they use threads', 'Yes, thanks to the GIL'),
             salt='parallel_models:5', answer='905ab50ac093e20e6438a1a0722779870a3aea04838b6e2f83c0314ea74725d8',
             why='NBYDTgkSEV9TVAAMTkIMCE8CBFIYAxlFAE8ABQgdTFoEBAwaQxsAHFNCBBQKUgNSHApOABsGGwNEUExPGRIbGlAGHRpFERYDHFIKTlldVUMDHQoYRAENTgRBBV9UB1IYQg0QEk8aBEwfTxQADwAdDkhEG0UFAgoaSQdSDkgDEUYDFxZTFgFVEF5IHEsXFAlICBQSGkMBAA9FQhYOAAUWDg=='),
]
