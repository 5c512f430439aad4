# Sourced by gpu_check.sh and gpu_grids.sh on the device machine (no network there): unpack the MNIST and
# Fashion-MNIST idx files carried gzipped under .gpu/ where data/ lacks them, and put the finished runs
# carried under .gpu/results/ into results/ so that they are reused.
for d in MNIST FashionMNIST; do  # unpacked only where absent
  [ -e data/$d/raw/train-images-idx3-ubyte ] && continue
  if [ -d .gpu/$d ]; then mkdir -p data/$d/raw; for f in .gpu/$d/*.gz; do gunzip -c "$f" > data/$d/raw/$(basename "$f" .gz); done; fi
done
[ -d .gpu/results ] && mkdir -p results && cp -a .gpu/results/. results/
