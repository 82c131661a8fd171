"""Parameters of training the success classifier (``rewards.train``; ``run train_reward``)."""
from .spec import Param

REWARD_TRAINING = {
    'train_epochs': Param(30, 'passes over the training episodes\' frames', (1, 100000)),
    'batch_size': Param(64, 'frames per gradient step', (1, 65536)),
    'lr': Param(3e-4, 'Adam learning rate', (1e-7, 1.0)),
    'held_out': Param(0.25, 'fraction of the episodes kept out of training for the figures', (0.0, 0.9)),
    'threshold': Param(0.5, 'success probability at or over which a frame counts as a success (stored in '
                             'the checkpoint: the run uses it)', (0.01, 0.99)),
    'shift_px': Param(0, 'random image shift in pixels while training (DrQ augmentation; 0: none): a fixed '
                         'camera sees success as a position in the image (a cube lifted 10 cm is a few pixels '
                         'at 64x64), which a shift blurs', (0, 64)),
    'seed': Param(0, 'seed of the split, the initial weights and the batches'),
}
