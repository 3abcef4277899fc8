"""The PsychoPy lab runner: the experiment's trials on a lab display, frame-counted and crash-safe.

``session.run_lab_session`` runs one participant's session, whose run is what ``presentation``
shows (window, images, grid, prompt), when ``pacing`` shows it (frames, screens, the pause, a trial's
phases) and how ``responses`` reads and stores the answers (one row per response a trial type's card
names); ``display`` opens the window and settles the refresh rate; ``inputs`` reads answers from the
mouse or keyboard;
``simulate`` is a scripted participant that answers through the same window events.
PsychoPy is imported only inside these modules' functions, so ``cuebench`` works
without it.
"""
