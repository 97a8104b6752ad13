"""Write-path preprocessing (sensory memory): normalisation now; compression and segmentation later."""
