"""The PsychoPy lab runner: the experiment's trials on a lab display, frame-counted and crash-safe.

``session.run_lab_session`` runs one participant's session; a run is made of parts, each a class with a
typed constructor, that the runner (``session._Runner``) holds: ``log.SessionLog`` (PsychoPy's log
file and the console), ``presentation.Display`` (window, refresh rate, what is drawn: images, grid,
prompt, text screens), ``responses.ResponseReader`` (the answer among the mouse's or keyboard's
presses, ``inputs``, by the response a trial type's card names), ``pacing.Pacing`` (when it is shown:
frames, screens, the pause, a trial's phases) and ``responses.AnswerWriter`` (each answer committed as
one response row). ``display`` opens the window and settles the refresh rate; ``simulate`` is a scripted
participant that answers through the same window events. PsychoPy is imported only inside these
modules' functions, so ``cuebench`` works without it.
"""
